// snapsum.go covers the one file of a snapshot that no checksum covered:
// meta.json.
//
// hashicorp/raft v1.7.3's FileSnapshotStore (file_snapshot.go) writes each
// snapshot as a directory <term>-<index>-<msec> holding state.bin and
// meta.json. FileSnapshotSink tees every byte written into state.bin
// through a CRC-64 (ECMA) (Create: io.MultiWriter(stateFile, stateHash)
// under a bufio.Writer), and writes the sum into meta.json (finalize,
// writeMeta); Open hashes the whole of state.bin again and refuses a
// mismatch. So every byte of state.bin is covered, including the headers
// inside it: raftnode's 57-byte chain header (chain.go), then the state
// machine's own bytes (for lockcluster, fsm's "LCKSNAP\x00" version ...
// format, which carries its own CRC-32C over everything before it).
// meta.json (the ID, index, term, version, configuration, configuration
// index, legacy peer list, size and that CRC) is JSON that raft decodes
// with no check at all: encoding/json matches field names
// case-insensitively and ignores unknown ones, and only the CRC, the size,
// the ID, the term, the index and the version's range are compared with
// anything (by checkSnapshots). A flipped bit in a field name, in
// "Version":1 (0 makes raft rebuild the configuration from the legacy
// Peers list, whose IDs are addresses), in the configuration index, or in
// a server's ID, address or suffrage, was accepted
// (TestSnapshotEveryBitFlipRefused).
//
// meta.sum, next to meta.json in the snapshot's directory, holds the
// CRC-32C and the length of meta.json's bytes. It is written when raft
// closes the snapshot's sink (every snapshot: taken by this node, received
// from the leader by InstallSnapshot, or seeded by SeedDataDir goes
// through Create), and verified by checkSnapshots at start and by every
// Open (the restore, the leader sending it to a follower, a user's open).
// It is compared byte for byte with what it must be, so a flip in meta.sum
// itself is refused too. FileSnapshotStore ignores other files in the
// directory and removes the whole directory when it reaps a snapshot.
//
// A snapshot without meta.sum was written by an older version, or the node
// stopped between raft's rename of the directory into place and the write
// of meta.sum (FileSnapshotSink.Close renames, then returns; meta.sum can
// only follow). It is verified as far as its fields allow (checkSnapshots'
// checks) and sealed: its meta.sum written, with a warning in the log.

package raftnode

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

const (
	// snapshotMetaFile and snapshotStateFile are raft's names
	// (file_snapshot.go, metaFilePath, stateFilePath).
	snapshotMetaFile  = "meta.json"
	snapshotStateFile = "state.bin"
	// snapshotSumFile is the checksum of snapshotMetaFile.
	snapshotSumFile = "meta.sum"
)

var snapshotSumTable = crc32.MakeTable(crc32.Castagnoli)

// snapshotSumFormat is meta.sum: a format line, then meta.json's length
// and CRC-32C.
const snapshotSumFormat = "lockcluster snapshot sum 1\nmeta.json %d crc32c %08x\n"

// snapshotSum is the content of meta.sum for meta.json's bytes.
func snapshotSum(meta []byte) []byte {
	return fmt.Appendf(nil, snapshotSumFormat, len(meta), crc32.Checksum(meta, snapshotSumTable))
}

// checkSnapshotSum compares path/meta.sum with meta, the bytes of
// path/meta.json: byte for byte with what it must be. sealed is false when
// there is no meta.sum; reason is empty when it matches (or is missing),
// and names the file at fault; err is an error that is not about the
// content.
func checkSnapshotSum(path string, meta []byte) (sealed bool, reason string, err error) {
	got, err := os.ReadFile(filepath.Join(path, snapshotSumFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, "", nil
	case contentErr(err):
		return true, fmt.Sprintf("%s: %v", snapshotSumFile, err), nil
	case err != nil:
		return true, "", err
	}
	if bytes.Equal(got, snapshotSum(meta)) {
		return true, "", nil
	}
	var n int
	var sum uint32
	if _, err := fmt.Sscanf(string(got), snapshotSumFormat, &n, &sum); err != nil || !bytes.Equal(got, fmt.Appendf(nil, snapshotSumFormat, n, sum)) {
		return true, fmt.Sprintf("%s is damaged: %.100q", snapshotSumFile, got), nil
	}
	return true, fmt.Sprintf("%s does not match its checksum in %s (%d bytes, CRC-32C %08x; %s says %d bytes, %08x)",
		snapshotMetaFile, snapshotSumFile, len(meta), crc32.Checksum(meta, snapshotSumTable), snapshotSumFile, n, sum), nil
}

// sealSnapshot writes path/meta.sum for meta, the bytes of path/meta.json,
// durably.
func sealSnapshot(path string, meta []byte) error {
	return writeFileDurably(filepath.Join(path, snapshotSumFile), snapshotSum(meta))
}

// checkedSnapshots is the node's snapshot store: raft's FileSnapshotStore
// with meta.sum written when a snapshot is closed and verified when one is
// opened.
type checkedSnapshots struct {
	raft.SnapshotStore
	dir    string // snapshotsDir: where the snapshots' directories are
	logger hclog.Logger
	// mu orders the writes of meta.sum (a sink's Close, an Open sealing a
	// snapshot that has none) with each other and with the Opens that
	// could see a snapshot between raft's rename and its meta.sum.
	mu sync.Mutex
}

// newCheckedSnapshots wraps the FileSnapshotStore opened on base (what
// raft.NewFileSnapshotStoreWithLogger was given: DataDir/snapshots).
func newCheckedSnapshots(store *raft.FileSnapshotStore, base string, logger hclog.Logger) *checkedSnapshots {
	return &checkedSnapshots{SnapshotStore: store, dir: filepath.Join(base, "snapshots"), logger: logger}
}

// Create starts a snapshot whose sink seals it when closed.
func (s *checkedSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &checkedSink{SnapshotSink: sink, store: s}, nil
}

// Open verifies the snapshot's meta.json against its meta.sum before raft
// opens it (raft then checks state.bin against meta.json's CRC-64). A
// snapshot without meta.sum is checked as checkSnapshots checks it and
// sealed.
func (s *checkedSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	snap, ok := parseSnapshotName(id)
	if !ok {
		return nil, nil, fmt.Errorf("raftnode: %q is not the name of a snapshot raft wrote", id)
	}
	path := filepath.Join(s.dir, id)
	b, sealed, reason, err := s.readSealed(path)
	if err == nil && !sealed {
		s.mu.Lock() // a sink may be sealing it now
		defer s.mu.Unlock()
		b, sealed, reason, err = s.readSealed(path)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("raftnode: opening snapshot %s: %w", id, err)
	}
	if reason == "" && !sealed {
		_, reason = checkSnapshotMeta(b, snap)
	}
	if reason != "" {
		s.logger.Error("a snapshot does not verify: refused", "snapshot", id, "path", path, "reason", reason)
		return nil, nil, fmt.Errorf("raftnode: snapshot %s does not verify: %s", id, reason)
	}
	meta, rc, err := s.SnapshotStore.Open(id) // checks state.bin's CRC-64
	if err != nil {
		return nil, nil, fmt.Errorf("raftnode: snapshot %s: %w", id, err)
	}
	if !sealed {
		if err := sealSnapshot(path, b); err != nil {
			s.logger.Error("could not write a snapshot's meta.sum; it is sealed at the next start", "snapshot", id, "error", err)
		} else {
			s.logger.Warn("a snapshot had no meta.sum (written by an older version, or the node stopped before writing it): verified as far as its fields allow, meta.sum written",
				"snapshot", id, "path", path)
		}
	}
	return meta, rc, nil
}

// readSealed reads path/meta.json and checks it against path/meta.sum.
func (s *checkedSnapshots) readSealed(path string) (meta []byte, sealed bool, reason string, err error) {
	meta, err = os.ReadFile(filepath.Join(path, snapshotMetaFile))
	if contentErr(err) {
		return nil, true, fmt.Sprintf("%s: %v", snapshotMetaFile, err), nil
	}
	if err != nil {
		return nil, false, "", err
	}
	sealed, reason, err = checkSnapshotSum(path, meta)
	return meta, sealed, reason, err
}

// checkedSink seals the snapshot once raft's sink has closed it.
type checkedSink struct {
	raft.SnapshotSink
	store  *checkedSnapshots
	closed bool
}

// Close finishes the snapshot (FileSnapshotSink.Close: state.bin fsynced,
// meta.json written and fsynced, the directory renamed into place, older
// snapshots reaped), then writes its meta.sum. If meta.sum cannot be
// written, Close fails: raft then neither compacts its log after the
// snapshot nor takes it as installed; the snapshot, in place and
// complete, is sealed when it is next opened or at the next start.
func (k *checkedSink) Close() error {
	if k.closed {
		return nil
	}
	k.closed = true
	s := k.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := k.SnapshotSink.Close(); err != nil {
		return err
	}
	id := k.ID()
	path := filepath.Join(s.dir, id)
	err := func() error {
		b, err := os.ReadFile(filepath.Join(path, snapshotMetaFile))
		if err != nil {
			return err
		}
		snap, ok := parseSnapshotName(id)
		if !ok {
			return fmt.Errorf("%q is not the name of a snapshot raft wrote", id)
		}
		if _, reason := checkSnapshotMeta(b, snap); reason != "" {
			return errors.New(reason)
		}
		return sealSnapshot(path, b)
	}()
	if err != nil {
		s.logger.Error("a snapshot was written but its meta.sum was not", "snapshot", id, "path", path, "error", err)
		return fmt.Errorf("raftnode: writing meta.sum of snapshot %s: %w", id, err)
	}
	return nil
}

func (k *checkedSink) Cancel() error {
	k.closed = true
	return k.SnapshotSink.Cancel()
}

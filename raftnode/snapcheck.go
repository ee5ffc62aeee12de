// snapcheck.go owns the snapshot directory at start, before raft reads it:
// it removes the partial snapshots a killed node leaves behind, and sets a
// snapshot that does not verify aside, so that the node falls back to an
// older one, or starts with none and is repaired from the leader, instead
// of not starting at all.
//
// What happens without it (hashicorp/raft v1.7.3): NewRaft (api.go) calls
// restoreSnapshot, which tries the snapshots that FileSnapshotStore.List
// returns, newest first (tryRestoreSingleSnapshot); FileSnapshotStore.Open
// (file_snapshot.go) checks the CRC-64 of state.bin against meta.json and
// fails on a mismatch, so a corrupt newest snapshot is skipped and the next
// one restored. NewRaft then reads every log entry from that snapshot's
// index + 1 to the last ("Scan through the log for any configuration
// change entries") and panics on the first one missing: after a snapshot,
// raft compacts the log up to min(snapshot, last - TrailingLogs)
// (snapshot.go, compactLogsWithTrailing), and a follower that installed a
// snapshot from the leader keeps no log below it at all (raft.go,
// installSnapshot → removeOldLogs, the log being monotonic), so the entries
// after the older snapshot are usually gone. The node panics at every
// start. With no snapshot that restores, NewRaft fails with "failed to load
// any existing snapshots". TestCorruptNewestSnapshotRestart shows both.

package raftnode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// snapshotsDir is the directory in which raft's FileSnapshotStore keeps a
// node's snapshots, one directory each: node.go opens the store on
// DataDir/snapshots, and NewFileSnapshotStoreWithLogger works in
// base/"snapshots" (file_snapshot.go, snapPath).
func snapshotsDir(dataDir string) string {
	return filepath.Join(dataDir, "snapshots", "snapshots")
}

// snapshotTmpSuffix marks a snapshot being written: FileSnapshotStore.Create
// writes into <id>.tmp and FileSnapshotSink.Close renames it to <id>
// (file_snapshot.go, tmpSuffix). List skips such directories and nothing
// removes them.
const snapshotTmpSuffix = ".tmp"

// snapshotCorruptSuffix names a snapshot set aside by checkSnapshots. It is
// moved out of dir, one level up: FileSnapshotStore lists every directory
// in dir whose meta.json decodes, whatever its name (getSnapshots skips only
// .tmp), so a renamed snapshot left in dir would still be listed, its ID
// (from meta.json) no longer opens, and ReapSnapshots would never remove it.
const snapshotCorruptSuffix = ".corrupt"

// removePartialSnapshots removes the partial snapshots in dir (see
// snapshotsDir): the <id>.tmp directories a node stopped while writing a
// snapshot, or receiving one from the leader, leaves behind. It must be
// called before raft starts, when no snapshot is being written. A missing
// dir is not an error.
func removePartialSnapshots(dir string, logger hclog.Logger) error {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("raftnode: %w", err)
	}
	removed := false
	for _, e := range entries {
		if !e.IsDir() || !strings.HasSuffix(e.Name(), snapshotTmpSuffix) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if err := os.RemoveAll(path); err != nil {
			return fmt.Errorf("raftnode: removing a partial snapshot: %w", err)
		}
		logger.Info("removed a partial snapshot left by an interrupted write", "path", path)
		removed = true
	}
	if removed {
		return fsyncDir(dir)
	}
	return nil
}

// snapshotFileMeta is meta.json as FileSnapshotSink writes it
// (file_snapshot.go, fileSnapshotMeta: the SnapshotMeta, and CRC, the
// CRC-64 (ECMA) of state.bin).
type snapshotFileMeta struct {
	raft.SnapshotMeta
	CRC []byte
}

// snapshotOnDisk is one snapshot directory, ordered as
// FileSnapshotStore orders them (snapMetaSlice.Less: term, index, ID).
// Term and index come from its name, <term>-<index>-<msec>
// (file_snapshot.go, snapshotName), so that a snapshot whose meta.json is
// damaged still has its place.
type snapshotOnDisk struct {
	name        string
	term, index uint64
}

// parseSnapshotName reads <term>-<index>-<msec>; ok is false for any
// other name.
func parseSnapshotName(name string) (snapshotOnDisk, bool) {
	parts := strings.Split(name, "-")
	if len(parts) != 3 {
		return snapshotOnDisk{}, false
	}
	var n [3]uint64
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return snapshotOnDisk{}, false
		}
		n[i] = v
	}
	return snapshotOnDisk{name: name, term: n[0], index: n[1]}, true
}

// contentErr tells the errors reading a snapshot's file that are about
// its content: the file is missing, or the disk cannot read it.
func contentErr(err error) bool {
	return os.IsNotExist(err) || errors.Is(err, syscall.EIO)
}

// verifySnapshot checks one snapshot as thoroughly as its files allow:
// meta.json matches its checksum in meta.sum (snapsum.go), when there is
// one; meta.json decodes (checkSnapshotMeta); state.bin has the size and
// the CRC-64 meta.json records (what FileSnapshotStore.Open checks,
// before every restore). reason is empty when it verifies, and names the
// file that does not; err is an error that is not about the snapshot's
// content (a permission, no file handles left).
func verifySnapshot(dir string, s snapshotOnDisk) (reason string, err error) {
	path := filepath.Join(dir, s.name)
	b, err := os.ReadFile(filepath.Join(path, snapshotMetaFile))
	if err != nil {
		if contentErr(err) {
			return fmt.Sprintf("meta.json: %v", err), nil
		}
		return "", err
	}
	if _, reason, err := checkSnapshotSum(path, b); reason != "" || err != nil {
		return reason, err
	}
	meta, reason := checkSnapshotMeta(b, s)
	if reason != "" {
		return reason, nil
	}
	f, err := os.Open(filepath.Join(path, snapshotStateFile))
	if err != nil {
		if contentErr(err) {
			return fmt.Sprintf("state.bin: %v", err), nil
		}
		return "", err
	}
	defer f.Close()
	h := crc64.New(crc64.MakeTable(crc64.ECMA))
	n, err := io.Copy(h, f)
	if err != nil {
		if contentErr(err) {
			return fmt.Sprintf("state.bin: %v", err), nil
		}
		return "", err
	}
	if n != meta.Size {
		return fmt.Sprintf("state.bin has %d bytes, meta.json says %d", n, meta.Size), nil
	}
	if sum := h.Sum(nil); !bytes.Equal(sum, meta.CRC) {
		return fmt.Sprintf("state.bin fails its CRC-64 (stored %x, computed %x)", meta.CRC, sum), nil
	}
	return "", nil
}

// checkSnapshotMeta checks b, the bytes of snapshot s's meta.json, as far
// as its fields allow, which is all there is for a snapshot without
// meta.sum: it decodes, with no unknown field (but encoding/json matches
// names case-insensitively); it names the directory, and the term and
// index in the name; its version is one raft reads; its configuration
// index is not past the snapshot; its CRC has 8 bytes. reason is empty
// when it passes.
func checkSnapshotMeta(b []byte, s snapshotOnDisk) (meta snapshotFileMeta, reason string) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&meta); err != nil {
		return meta, fmt.Sprintf("meta.json does not decode: %v", err)
	}
	if rest, _ := io.ReadAll(dec.Buffered()); len(bytes.TrimSpace(rest)) > 0 || dec.More() {
		return meta, "meta.json has bytes after its object"
	}
	switch {
	case meta.ID != s.name:
		return meta, fmt.Sprintf("meta.json names snapshot %q", meta.ID)
	case meta.Term != s.term || meta.Index != s.index:
		return meta, fmt.Sprintf("meta.json says term %d, index %d", meta.Term, meta.Index)
	case meta.Version < raft.SnapshotVersionMin || meta.Version > raft.SnapshotVersionMax:
		return meta, fmt.Sprintf("meta.json says version %d", meta.Version)
	case meta.ConfigurationIndex > meta.Index:
		return meta, fmt.Sprintf("meta.json says configuration index %d, past the snapshot's", meta.ConfigurationIndex)
	case len(meta.CRC) != 8:
		return meta, fmt.Sprintf("meta.json has a %d-byte CRC", len(meta.CRC))
	}
	return meta, ""
}

// checkSnapshots verifies the snapshots in dir (see snapshotsDir), newest
// first, up to the first that verifies: that one is what raft will restore
// (NewRaft → restoreSnapshot). It must be called after
// removePartialSnapshots and before raft.NewRaft; logs is the node's log
// store.
//
// A snapshot that does not verify is moved to <dir>/../<id>.corrupt, kept
// as evidence, out of raft's sight. If one was:
//
//   - the log covers every entry after the snapshot raft will now restore
//     (or from index 1, if none is left), up to the newest corrupt
//     snapshot's index: nothing is lost. The node starts from the older
//     snapshot and its log, as after any restart; no damage.
//   - the log has entries but does not reach back to that snapshot: raft
//     would panic reading the first missing one (NewRaft's configuration
//     scan), and the entries cannot be applied without the state before
//     them. They are deleted (as raft itself deletes the log when it
//     installs a snapshot from the leader: raft.go, installSnapshot →
//     removeOldLogs), and the node starts from the older snapshot, or
//     from none.
//   - either way, when the node now holds fewer entries than it had
//     (through the corrupt snapshot), it may have acknowledged entries to
//     a leader that it no longer has: damage, Store "snapshot", Index the
//     first index it no longer holds. The node is then fenced, and the
//     leader repairs it by sending entries or its own snapshot
//     (InstallSnapshot).
//
// A snapshot that verifies but that the state machine fails to restore is
// not detected here (only restoring it tells); raft then tries the next.
func checkSnapshots(dir string, logs raft.LogStore, logger hclog.Logger) (*storageDamage, error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("raftnode: %w", err)
	}
	var snaps []snapshotOnDisk
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), snapshotTmpSuffix) {
			continue
		}
		s, ok := parseSnapshotName(e.Name())
		if !ok {
			logger.Warn("not a snapshot raft wrote; left alone", "path", filepath.Join(dir, e.Name()))
			continue
		}
		snaps = append(snaps, s)
	}
	sort.Slice(snaps, func(i, j int) bool { // newest first, as raft lists them
		a, b := snaps[i], snaps[j]
		if a.term != b.term {
			return a.term > b.term
		}
		if a.index != b.index {
			return a.index > b.index
		}
		return a.name > b.name
	})

	var good *snapshotOnDisk
	var lost uint64 // the highest index held through a corrupt snapshot
	var moved, reasons []string
	for i, s := range snaps {
		reason, err := verifySnapshot(dir, s)
		if err != nil {
			return nil, fmt.Errorf("raftnode: verifying snapshot %s: %w", s.name, err)
		}
		if reason == "" {
			good = &snaps[i]
			if err := sealOnce(dir, s.name, logger); err != nil {
				return nil, fmt.Errorf("raftnode: writing meta.sum of snapshot %s: %w", s.name, err)
			}
			break
		}
		to, err := moveSnapshotAside(dir, s.name)
		if err != nil {
			return nil, fmt.Errorf("raftnode: setting snapshot %s aside: %w", s.name, err)
		}
		logger.Error("a snapshot does not verify: set aside, raft will not use it", "snapshot", s.name, "index", s.index,
			"reason", reason, "moved_to", to)
		moved = append(moved, to)
		reasons = append(reasons, fmt.Sprintf("snapshot %s does not verify (%s)", s.name, reason))
		lost = max(lost, s.index)
	}
	if len(moved) == 0 {
		return nil, nil
	}

	base := uint64(0) // the index raft restores to
	if good != nil {
		base = good.index
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return nil, fmt.Errorf("raftnode: reading the log: %w", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return nil, fmt.Errorf("raftnode: reading the log: %w", err)
	}
	dropped := ""
	if last > base && first > base+1 {
		if err := logs.DeleteRange(first, last); err != nil {
			return nil, fmt.Errorf("raftnode: deleting the log that no snapshot reaches: %w", err)
		}
		logger.Error("deleted the log: it starts after a gap that only the corrupt snapshot covered",
			"restore_from", base, "first", first, "last", last)
		dropped = fmt.Sprintf(" (its log %d-%d, after a gap, deleted)", first, last)
		last = 0
	}
	has := max(base, last)
	if has >= lost {
		logger.Warn("starting from an older snapshot and the log after it: nothing lost", "restore_from", base, "log_last", last)
		return nil, nil
	}
	from := "no snapshot"
	if good != nil {
		from = "snapshot " + good.name
	}
	return &storageDamage{
		Store: "snapshot",
		Path:  moved[0],
		Index: has + 1,
		Reason: fmt.Sprintf("%s, set aside; the node restarts from %s and its log up to %d%s, short of index %d it held",
			strings.Join(reasons, "; "), from, has, dropped, lost),
	}, nil
}

// sealOnce writes the meta.sum of snapshot dir/name, which verified, if
// it has none (written by an older version, or the node stopped between
// the snapshot's rename into place and its meta.sum): the upgrade path.
func sealOnce(dir, name string, logger hclog.Logger) error {
	path := filepath.Join(dir, name)
	b, err := os.ReadFile(filepath.Join(path, snapshotMetaFile))
	if err != nil {
		return err
	}
	sealed, reason, err := checkSnapshotSum(path, b)
	if err != nil || sealed {
		return err
	}
	if reason != "" { // verifySnapshot just read it
		return errors.New(reason)
	}
	if err := sealSnapshot(path, b); err != nil {
		return err
	}
	logger.Warn("a snapshot had no meta.sum (written by an older version, or the node stopped before writing it): verified as far as its fields allow, meta.sum written",
		"snapshot", name, "path", path)
	return nil
}

// moveSnapshotAside moves dir/name to <dir>/../<name>.corrupt (or
// .corrupt.2, …, if taken) and makes the move durable.
func moveSnapshotAside(dir, name string) (string, error) {
	parent := filepath.Dir(dir)
	to := filepath.Join(parent, name+snapshotCorruptSuffix)
	for i := 2; ; i++ {
		if _, err := os.Lstat(to); os.IsNotExist(err) {
			break
		}
		to = filepath.Join(parent, fmt.Sprintf("%s%s.%d", name, snapshotCorruptSuffix, i))
	}
	if err := os.Rename(filepath.Join(dir, name), to); err != nil {
		return "", err
	}
	if err := fsyncDir(dir); err != nil {
		return "", err
	}
	return to, fsyncDir(parent)
}

package raftnode

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Seed describes a new data directory that starts a one-voter cluster
// from a state machine's snapshot (a backup restored: etcdutl's snapshot
// restore). The cluster then grows by joining nodes to it.
type Seed struct {
	// DataDir is the new node's Config.DataDir; it must not exist or be
	// empty.
	DataDir string
	// ID and Addr are the one voter: the node's Config.ID and the raft
	// address the others dial (its AdvertiseAddr, or BindAddr).
	ID, Addr string
	// Index is the last log index the state reflects; the new log goes on
	// at Index+1, so every new entry's index (a lock's fencing token) is
	// above every index in the state.
	Index uint64
	// Term is the snapshot's term (0: 1). The first election is for a term
	// above it.
	Term uint64
	// Data is the state machine's snapshot, as its Restore reads it.
	Data   io.Reader
	Logger hclog.Logger
}

// SeedDataDir writes s as raft state: a raft snapshot at s.Index whose
// configuration is the one voter, written through raft's own file
// snapshot store. A node started on the directory restores it, elects
// itself and serves the state.
//
// The snapshot's hash-chain header (chain.go) says "not known" at
// s.Index: the source cluster's chain describes a history this cluster
// does not have. The node's first term as leader proposes an anchor entry
// that starts the chain on every member, so checkpoints compare from there
// on; no checkpoint before the anchor can name an index a node can compare,
// so nothing fences a restored node.
func SeedDataDir(s Seed) (err error) {
	switch {
	case s.DataDir == "" || s.ID == "" || s.Addr == "":
		return errors.New("raftnode: Seed: DataDir, ID and Addr are required")
	case s.Index == 0:
		return errors.New("raftnode: Seed: the state's index must be above 0")
	case s.Data == nil:
		return errors.New("raftnode: Seed: no data")
	}
	if s.Term == 0 {
		s.Term = 1
	}
	if s.Logger == nil {
		s.Logger = hclog.NewNullLogger()
	}
	if err := emptyDir(s.DataDir); err != nil {
		return err
	}
	if err := os.MkdirAll(s.DataDir, 0o700); err != nil {
		return fmt.Errorf("raftnode: data dir: %w", err)
	}
	lock, err := lockDir(s.DataDir)
	if err != nil {
		return err
	}
	defer unlockDir(lock)
	base := filepath.Join(s.DataDir, "snapshots")
	fileSnaps, err := raft.NewFileSnapshotStoreWithLogger(base, snapshotsRetained, s.Logger.Named("snapshots"))
	if err != nil {
		return fmt.Errorf("raftnode: snapshot store: %w", err)
	}
	snaps := newCheckedSnapshots(fileSnaps, base, s.Logger.Named("snapshots")) // writes meta.sum
	conf := raft.Configuration{Servers: []raft.Server{{ID: raft.ServerID(s.ID), Address: raft.ServerAddress(s.Addr), Suffrage: raft.Voter}}}
	sink, err := snaps.Create(raft.SnapshotVersionMax, s.Index, s.Term, conf, s.Index, peerEncoder{})
	if err != nil {
		return fmt.Errorf("raftnode: creating the snapshot: %w", err)
	}
	header := (&chain{index: s.Index}).header() // known: false
	if _, err = sink.Write(header); err == nil {
		_, err = io.Copy(sink, s.Data)
	}
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("raftnode: writing the snapshot: %w", err)
	}
	if err := sink.Close(); err != nil { // fsyncs, moves it into place, writes meta.sum
		return fmt.Errorf("raftnode: writing the snapshot: %w", err)
	}
	s.Logger.Info("seeded a data directory from a snapshot", "dir", s.DataDir, "index", s.Index, "voter", s.ID, "addr", s.Addr)
	return nil
}

// emptyDir refuses a directory that has anything in it.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("raftnode: %w", err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("raftnode: %s is not empty (it holds %s): a restore seeds a new data directory only", dir, entries[0].Name())
	}
	return nil
}

// peerEncoder encodes the snapshot's legacy peer list (raft writes one
// next to the configuration) as NetworkTransport does: the address. Only
// that method of raft.Transport is used by the snapshot store.
type peerEncoder struct{ raft.Transport }

func (peerEncoder) EncodePeer(_ raft.ServerID, addr raft.ServerAddress) []byte { return []byte(addr) }

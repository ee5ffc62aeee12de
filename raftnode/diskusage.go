package raftnode

import (
	"os"
	"path/filepath"
)

// The log's disk, for monitoring: where the log is, what its files take,
// and what the file system that holds it has left (the disk guard's
// statfs: diskguard.go). Each call reads the directory and the file
// system afresh; nothing is kept.

// LogDir is the directory that holds the raft log: DataDir/wal (raft-wal),
// or DataDir itself with the bolt log (raft.db).
func (n *Node) LogDir() string {
	if n.stores.wal != nil {
		return n.stores.wal.dir
	}
	return n.cfg.DataDir
}

// LogBytes is the size of the raft log's files: raft-wal's segments (each
// preallocated whole when created) and its metadata, or raft.db with the
// bolt log (which also holds the term and vote, and does not shrink when
// raft compacts the log). A file removed while it is counted is left out.
func (n *Node) LogBytes() uint64 {
	if n.stores.wal == nil {
		if fi, err := os.Stat(filepath.Join(n.cfg.DataDir, "raft.db")); err == nil {
			return uint64(fi.Size())
		}
		return 0
	}
	entries, err := os.ReadDir(n.stores.wal.dir)
	if err != nil {
		return 0
	}
	var total uint64
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if probe, _ := filepath.Match(probePattern, e.Name()); probe {
			continue // the disk guard's space probe, removed at once
		}
		if fi, err := e.Info(); err == nil {
			total += uint64(fi.Size())
		}
	}
	return total
}

// DiskSpace reports the space left to this process and the size of the
// file system that holds the log (LogDir); known is false where they
// cannot be read (statfs fails, or a platform other than Linux).
func (n *Node) DiskSpace() (free, total uint64, known bool) {
	return diskSpace(n.LogDir())
}

//go:build !linux

package raftnode

// diskSpace is unknown here: segments keep raft-wal's default size and the
// disk guard reopens the log without waiting for free space.
func diskSpace(path string) (free, total uint64, ok bool) { return 0, 0, false }

// probeSpace cannot allocate ahead here.
func probeSpace(dir string, size int64) error { return nil }

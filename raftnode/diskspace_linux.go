package raftnode

import (
	"os"
	"path/filepath"
	"syscall"
)

// diskSpace reports the space left to this process (statfs f_bavail) and
// the size of the file system that holds path.
func diskSpace(path string) (free, total uint64, ok bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, 0, false
	}
	return st.Bavail * uint64(st.Bsize), st.Blocks * uint64(st.Bsize), true
}

// probeSpace checks that size bytes can be allocated in dir, as raft-wal
// allocates a new segment (fallocate, raft-wal fs/fs.go), and frees them.
func probeSpace(dir string, size int64) error {
	f, err := os.CreateTemp(dir, probePattern)
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	for {
		err = syscall.Fallocate(int(f.Fd()), 0, 0, size)
		if err != syscall.EINTR {
			break
		}
	}
	if err == syscall.EOPNOTSUPP {
		return nil // the file system cannot tell; raft-wal then writes without preallocating
	}
	if err != nil {
		return &os.PathError{Op: "fallocate", Path: filepath.Join(dir, filepath.Base(f.Name())), Err: err}
	}
	return nil
}

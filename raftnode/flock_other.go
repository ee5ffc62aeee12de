//go:build !unix

package raftnode

import "os"

// Without flock the data directory is not locked; bolt's own file lock
// still keeps a second process out of raft.db.
func flock(*os.File) error   { return nil }
func funlock(*os.File) error { return nil }

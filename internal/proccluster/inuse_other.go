//go:build !unix

package proccluster

// locked: without flock no node locks its data directory (raftnode).
func locked(string) bool { return false }

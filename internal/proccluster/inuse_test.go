package proccluster

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A data directory whose lock a process holds (a node started by hand on
// it) is in use: Stop leaves the cluster's directory then, and removes it
// once the lock is gone.
func TestStopKeepsDirInUse(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	c, err := New(Config{Bin: "/bin/false", Nodes: 2, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	raft := filepath.Join(c.Nodes[1].Dir, "raft")
	if err := os.MkdirAll(raft, 0o755); err != nil {
		t.Fatal(err)
	}
	// Node 0's lock is left by a node that exited: nobody holds it.
	if err := os.MkdirAll(c.Nodes[0].Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.Nodes[0].Dir, "LOCK"), []byte("4141\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(raft, "LOCK"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	lock.WriteString("4242\n")
	if h := c.InUse(); len(h) != 0 {
		t.Fatalf("an unlocked LOCK file is in use: %+v", h)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	h := c.InUse()
	if len(h) != 1 || h[0].Dir != raft || h[0].PID != 4242 {
		t.Fatalf("in use: %+v, want %s held by 4242", h, raft)
	}
	c.Stop()
	if _, err := os.Stat(raft); err != nil {
		t.Fatalf("Stop removed a directory in use: %v", err)
	}
	syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	c.Stop()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("Stop left the directory no process uses: %v", err)
	}
}

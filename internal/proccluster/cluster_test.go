package proccluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

// fakeServe is a stand-in for the lockcluster binary: it prints its
// arguments and waits for a signal.
func fakeServe(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "fake-serve")
	script := "#!/bin/sh\necho \"args: $*\"\ntrap 'echo terminated; exit 0' TERM\nwhile :; do sleep 0.05; done\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

func procState(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2 : i+3]
	}
	return ""
}

func TestClusterProcesses(t *testing.T) {
	var mu sync.Mutex
	exits := map[string][]bool{} // node id: expected, per exit
	c, err := New(Config{Bin: fakeServe(t), Nodes: 3, TempPrefix: "proccluster-test-", StartMarker: "test",
		Extra: func(c *Cluster, i int) []string { return []string{"--extra", c.Nodes[(i+1)%3].Raft} },
		OnExit: func(n *Node, _ error, expected bool) {
			mu.Lock()
			exits[n.ID] = append(exits[n.ID], expected)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	if err := c.StartAll(); err != nil {
		t.Fatal(err)
	}
	logged := func(i int, what string) int {
		b, _ := os.ReadFile(c.Nodes[i].Log)
		return strings.Count(string(b), what)
	}
	n0 := c.Nodes[0]
	testutil.Eventually(t, 30*time.Second, "node0's arguments in its log", func() bool { return logged(0, "args: serve --id node0") == 1 })
	if b, _ := os.ReadFile(n0.Log); !strings.Contains(string(b), "--bootstrap node0="+n0.Raft+",node1=") ||
		!strings.Contains(string(b), "--extra "+c.Nodes[1].Raft) || !strings.Contains(string(b), "=== test: starting node0") {
		t.Fatalf("node0's log:\n%s", b)
	}
	seen := map[string]bool{}
	for _, n := range c.Nodes {
		for _, a := range []string{n.GRPC, n.Raft, n.HTTP} {
			if seen[a] {
				t.Fatalf("address %s given twice", a)
			}
			seen[a] = true
		}
	}

	// Pause and resume.
	if err := c.Pause(1); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "node1 to stop", func() bool { return procState(c.PID(1)) == "T" })
	if err := c.Resume(1); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "node1 to run again", func() bool { return procState(c.PID(1)) != "T" })

	// Kill, then start again on the same directory: the log grows.
	if err := c.Kill(0); err != nil {
		t.Fatal(err)
	}
	if c.Running(0) || c.PID(0) != 0 {
		t.Fatal("node0 runs after Kill")
	}
	if err := c.Start(0); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(0); err == nil {
		t.Fatal("a running node was started twice")
	}
	testutil.Eventually(t, 30*time.Second, "node0's second start in its log", func() bool { return logged(0, "args: serve") == 2 })

	// A node that dies by itself is an unexpected exit.
	syscall.Kill(c.PID(2), syscall.SIGKILL)
	testutil.Eventually(t, 30*time.Second, "node2 to be gone", func() bool { return !c.Running(2) })
	if c.ProcessState(2) == nil {
		t.Fatal("no process state for node2")
	}

	if err := c.RestartAll(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for i := range c.Nodes {
		if !c.Running(i) {
			t.Fatalf("node%d not running after RestartAll", i)
		}
	}
	testutil.Eventually(t, 30*time.Second, "node1 to say it was terminated", func() bool { return logged(1, "terminated") == 1 })
	dir := c.Dir
	c.Stop()
	testutil.Eventually(t, 30*time.Second, "every exit to be reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(exits["node0"]) == 3 && len(exits["node1"]) == 2 && len(exits["node2"]) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	if got := fmt.Sprint(exits["node0"], exits["node1"], exits["node2"]); got != "[true true true] [true true] [false true]" {
		t.Fatalf("expected exits %s", got)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("Stop left %s: %v", dir, err)
	}
}

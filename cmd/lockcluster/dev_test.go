package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/proccluster"
)

// freeBase finds a base port whose dev ports (base+10i, +1, +2 for three
// nodes) are free and handed out to no other process (proccluster).
func freeBase(t *testing.T) int {
	t.Helper()
	base, err := proccluster.FreePorts("127.0.0.1", 23)
	if err != nil {
		t.Fatal(err)
	}
	return base
}

// 'lockcluster dev' starts three processes, prints their addresses and
// LOCKCLUSTER_ADDR, serves locks, survives the loss of a node, and on
// SIGINT stops every node and removes its temporary data.
func TestDevCluster(t *testing.T) {
	bin := binary(t)
	base := freeBase(t)
	cmd := exec.Command(bin, "dev", "--base-port", strconv.Itoa(base))
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var addr, dataDir string
	var pids []int
	pidRe := regexp.MustCompile(`node\d+\s+pid (\d+)`)
	deadline := time.After(30 * time.Second)
	for addr == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("dev exited before it was ready")
			}
			if m := pidRe.FindStringSubmatch(l); m != nil {
				pid, _ := strconv.Atoi(m[1])
				pids = append(pids, pid)
			}
			if v, ok := strings.CutPrefix(l, "LOCKCLUSTER_ADDR="); ok {
				addr = v
			}
			if v, ok := strings.CutPrefix(l, "lockcluster dev: 3 nodes, data in "); ok {
				dataDir, _, _ = strings.Cut(v, " ")
			}
		case <-deadline:
			t.Fatal("dev printed no LOCKCLUSTER_ADDR within 30s")
		}
	}
	go io.Copy(io.Discard, stdout)
	if len(pids) != 3 || dataDir == "" || strings.Count(addr, ",") != 2 {
		t.Fatalf("pids %v, data dir %q, addr %q", pids, dataDir, addr)
	}
	if !strings.HasPrefix(addr, "127.0.0.1:"+strconv.Itoa(base)+",") {
		t.Fatalf("node 0 is not on the base port: %s", addr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := lockcluster.Dial(ctx, strings.Split(addr, ","))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Request(ctx, "dev", lockcluster.Options{}, func(context.Context, *lockcluster.Lock) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// Kill one node: the cluster goes on.
	syscall.Kill(pids[1], syscall.SIGKILL)
	if err := c.Request(ctx, "dev", lockcluster.Options{}, func(context.Context, *lockcluster.Lock) error { return nil }); err != nil {
		t.Fatalf("after a node was killed: %v", err)
	}

	c.Close(ctx)
	// The two nodes left never diverged (hashcheck_test.go); node 1 is dead.
	checkAppliedHashes(t, []string{"127.0.0.1:" + strconv.Itoa(base+2), "127.0.0.1:" + strconv.Itoa(base+22)})

	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("dev exited with %v after SIGINT", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("dev did not stop within 30s of SIGINT")
	}
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("node pid %d still runs after dev stopped", pid)
		}
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("temporary data dir %s still exists: %v", dataDir, err)
	}
}

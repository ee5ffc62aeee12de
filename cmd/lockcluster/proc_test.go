package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/test/ports"
)

// These tests run the real binary: a cluster of 'lockcluster serve'
// processes on loopback, which a test can SIGKILL.

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// binary builds the lockcluster binary once per test run.
func binary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "lockcluster-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "lockcluster")
		out, err := exec.Command("go", "build", "-tags", "hashicorpmetrics", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// freePort picks a free port for a node process; this package's tests take
// them from 20000-25999 (see ports.Free).
func freePort(t *testing.T) string {
	t.Helper()
	addr, err := ports.Free(20000, 26000)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

type proc struct {
	id, grpc, raft, http string
	args                 []string
	cmd                  *exec.Cmd
	log                  string
	done                 chan struct{}
}

type procCluster struct {
	t     *testing.T
	bin   string
	nodes []*proc
	opts  []lockcluster.Option // what an admin client needs (TLS, token)
}

func startProcs(t *testing.T, n int) *procCluster {
	t.Helper()
	return startProcsWith(t, n, nil, nil)
}

// startProcsWith starts n nodes with extra serve arguments per node, and
// waits for a leader with the given client options.
func startProcsWith(t *testing.T, n int, extra func(id string) []string, opts []lockcluster.Option) *procCluster {
	t.Helper()
	pc := &procCluster{t: t, bin: binary(t), opts: opts}
	dir := t.TempDir()
	var peers []string
	for i := 0; i < n; i++ {
		p := &proc{id: fmt.Sprintf("node%d", i), grpc: freePort(t), raft: freePort(t), http: freePort(t)}
		p.log = filepath.Join(dir, p.id+".log")
		pc.nodes = append(pc.nodes, p)
		peers = append(peers, p.id+"="+p.raft)
	}
	for _, p := range pc.nodes {
		p.args = []string{"serve", "--id", p.id, "--data-dir", filepath.Join(dir, p.id), "--grpc-addr", p.grpc,
			"--raft-addr", p.raft, "--http-addr", p.http, "--bootstrap", strings.Join(peers, ",")}
		if extra != nil {
			p.args = append(p.args, extra(p.id)...)
		}
		pc.start(p)
	}
	t.Cleanup(func() {
		var running []string
		for _, p := range pc.nodes {
			select {
			case <-p.done:
			default:
				running = append(running, p.http)
			}
		}
		checkAppliedHashes(t, running) // hashcheck_test.go: the replicas never diverged
		for _, p := range pc.nodes {
			pc.signal(p, syscall.SIGTERM)
		}
		for _, p := range pc.nodes {
			pc.wait(p)
		}
		if t.Failed() {
			for _, p := range pc.nodes {
				b, _ := os.ReadFile(p.log)
				t.Logf("--- %s log:\n%s", p.id, b)
			}
		}
	})
	pc.leader(15 * time.Second)
	for _, p := range pc.nodes {
		select {
		case <-p.done:
			b, _ := os.ReadFile(p.log)
			t.Fatalf("%s exited at start:\n%s", p.id, b)
		default:
		}
	}
	return pc
}

func (pc *procCluster) start(p *proc) {
	pc.t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		pc.t.Fatal(err)
	}
	p.cmd = exec.Command(pc.bin, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.Env = append(os.Environ(), "NO_COLOR=1")
	if err := p.cmd.Start(); err != nil {
		pc.t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); f.Close(); close(done) }(p.cmd, p.done)
}

func (pc *procCluster) signal(p *proc, s syscall.Signal) {
	if p.cmd != nil && p.cmd.Process != nil {
		p.cmd.Process.Signal(s)
	}
}

func (pc *procCluster) wait(p *proc) {
	if p.done == nil {
		return
	}
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// restartAll sends sig to every node, waits for all of them to be gone,
// and starts them again on their data directories.
func (pc *procCluster) restartAll(sig syscall.Signal) {
	for _, p := range pc.nodes {
		pc.signal(p, sig)
	}
	for _, p := range pc.nodes {
		pc.wait(p)
	}
	for _, p := range pc.nodes {
		pc.start(p)
	}
}

// kill SIGKILLs node i and waits for it to be gone.
func (pc *procCluster) kill(i int) {
	pc.signal(pc.nodes[i], syscall.SIGKILL)
	pc.wait(pc.nodes[i])
}

func (pc *procCluster) addrs() []string {
	var out []string
	for _, p := range pc.nodes {
		out = append(out, p.grpc)
	}
	return out
}

// leader waits until a running node reports itself leader and returns its
// index.
func (pc *procCluster) leader(d time.Duration) int {
	pc.t.Helper()
	a, err := lockcluster.DialAdmin(pc.addrs(), pc.opts...)
	if err != nil {
		pc.t.Fatal(err)
	}
	defer a.Close()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		sts := a.Status(ctx)
		cancel()
		for i, st := range sts {
			if st.Err == "" && st.State == "Leader" {
				return i
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	pc.t.Fatalf("no leader within %s", d)
	return -1
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func dialT(t *testing.T, addrs []string, opts ...lockcluster.Option) *lockcluster.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := lockcluster.Dial(ctx, addrs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.Close(ctx)
	})
	return c
}

// directoryComplete waits until every member's API address is known, so
// that any node can forward to the leader.
func (pc *procCluster) directoryComplete(d time.Duration) {
	pc.t.Helper()
	a, err := lockcluster.DialAdmin(pc.addrs(), pc.opts...)
	if err != nil {
		pc.t.Fatal(err)
	}
	defer a.Close()
	waitFor(pc.t, d, "the member directory", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		ms, err := a.Members(ctx)
		if err != nil || len(ms) != len(pc.nodes) {
			return false
		}
		for _, m := range ms {
			if m.GRPCAddr == "" {
				return false
			}
		}
		return true
	})
}

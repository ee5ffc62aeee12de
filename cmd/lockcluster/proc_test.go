package main

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/proccluster"
	"github.com/lockcluster/lockcluster/internal/testutil"
)

// These tests run the real binary: a cluster of 'lockcluster serve'
// processes on loopback, which a test can SIGKILL.

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveBuilds()
	os.Exit(code)
}

// binary builds the lockcluster binary once per test run.
func binary(t *testing.T) string {
	t.Helper()
	return testutil.Build(t, ".")
}

// freePort picks a free port for a node process (proccluster.FreeAddr).
func freePort(t *testing.T) string {
	t.Helper()
	addr, err := proccluster.FreeAddr("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// procCluster is a proccluster.Cluster of this test's, whose helpers fail
// the test instead of returning errors.
type procCluster struct {
	*proccluster.Cluster
	t    *testing.T
	bin  string
	opts []lockcluster.Option // what an admin client needs (TLS, token)
}

func startProcs(t *testing.T, n int) *procCluster {
	t.Helper()
	return startProcsWith(t, n, nil, nil)
}

// startProcsWith starts n nodes with extra serve arguments per node, and
// waits for a leader with the given client options. When the test ends it
// checks that the running replicas never diverged (hashcheck_test.go),
// stops the nodes, and logs their logs if the test failed.
func startProcsWith(t *testing.T, n int, extra func(id string) []string, opts []lockcluster.Option) *procCluster {
	t.Helper()
	cfg := proccluster.Config{Bin: binary(t), Nodes: n, Dir: t.TempDir(), Keep: true, Admin: opts}
	if extra != nil {
		cfg.Extra = func(c *proccluster.Cluster, i int) []string { return extra(c.Nodes[i].ID) }
	}
	return startProcsConfig(t, cfg)
}

// startProcsConfig starts the cluster cfg describes, as startProcsWith.
func startProcsConfig(t *testing.T, cfg proccluster.Config) *procCluster {
	t.Helper()
	c, err := proccluster.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pc := &procCluster{Cluster: c, t: t, bin: cfg.Bin, opts: cfg.Admin}
	t.Cleanup(func() {
		checkAppliedHashes(t, pc.RunningHTTP())
		pc.Stop()
		if t.Failed() {
			for _, p := range pc.Nodes {
				b, _ := os.ReadFile(p.Log)
				t.Logf("--- %s log:\n%s", p.ID, b)
			}
		}
	})
	if err := c.StartAll(); err != nil {
		t.Fatal(err)
	}
	pc.leader(15 * time.Second)
	for i, p := range pc.Nodes {
		if !pc.Running(i) {
			b, _ := os.ReadFile(p.Log)
			t.Fatalf("%s exited at start:\n%s", p.ID, b)
		}
	}
	return pc
}

// start starts node i again on its data directory.
func (pc *procCluster) start(i int) {
	pc.t.Helper()
	if err := pc.Start(i); err != nil {
		pc.t.Fatal(err)
	}
}

// kill SIGKILLs node i and waits for it to be gone.
func (pc *procCluster) kill(i int) {
	pc.t.Helper()
	if err := pc.Kill(i); err != nil {
		pc.t.Fatal(err)
	}
}

// terminate stops node i with SIGTERM and waits for it to be gone.
func (pc *procCluster) terminate(i int) {
	pc.t.Helper()
	if err := pc.Terminate(i); err != nil {
		pc.t.Fatal(err)
	}
}

// restartAll sends sig to every node, waits for all of them to be gone,
// and starts them again on their data directories.
func (pc *procCluster) restartAll(sig syscall.Signal) {
	pc.t.Helper()
	if err := pc.RestartAll(sig); err != nil {
		pc.t.Fatal(err)
	}
}

func (pc *procCluster) addrs() []string { return pc.Addrs() }

// leader waits up to d for a running node that reports itself leader and
// returns its index.
func (pc *procCluster) leader(d time.Duration) int {
	pc.t.Helper()
	i, err := pc.Leader(context.Background(), d)
	if err != nil {
		pc.t.Fatal(err)
	}
	return i
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
	testutil.Eventually(pc.t, d, "the member directory", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		ms, err := a.Members(ctx)
		if err != nil || len(ms) != len(pc.Nodes) {
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

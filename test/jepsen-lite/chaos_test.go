package main

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// These tests run the real binary under faults; -short skips them.

// testLog sends the harness's output to t.Log, line by line.
type testLog struct {
	t  *testing.T
	mu sync.Mutex
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		l.t.Log(line)
	}
	return len(p), nil
}

// outDir is a directory for a run's history and logs: removed when the
// test passes, kept (and named) when it fails.
func outDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "jepsen-lite-"+t.Name()+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("history, node logs and reports kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}

// TestShortChaos is the short run of the README's test command: about a
// minute of kill, pause (nodes and client processes), partition and
// stale-leader faults under every workload (records included) with three
// watches, then the checkers. The long run is in docs/chaos.md.
func TestShortChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of faults; skipped with -short")
	}
	out := outDir(t)
	bin, err := buildBinary(out)
	if err != nil {
		t.Fatal(err)
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	cfg := config{
		Time: 40 * time.Second, TTL: 4 * time.Second, OpTimeout: 10 * time.Second, LinTimeout: time.Minute,
		Nemeses:   []string{nKill, nPause, nPauseClient, nIsolateLeader, nSplit, nOneWay, nStaleLeader},
		Workloads: allWorkloads, Clients: 14, ClientProcs: 2, Watchers: 3, Nodes: 3, Seed: seed, Out: out, Bin: bin, Log: &testLog{t: t},
	}
	cfg.Recovery = cfg.settle() + 6*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if !r.Valid {
			t.Errorf("checker %s failed: %d violations, e.g. %v", r.Name, r.Count, r.Violations[:min(3, len(r.Violations))])
		}
	}
}

// TestBrokenNodeIsCaught runs against a binary built with the jepsenbroken
// tag, whose followers grant locks from their own state (see
// internal/server/broken_on.go): the checkers must call the run invalid.
func TestBrokenNodeIsCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster; skipped with -short")
	}
	out := outDir(t)
	bin, err := buildBinary(out, "jepsenbroken")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config{
		Time: 6 * time.Second, Recovery: 2 * time.Second, TTL: 4 * time.Second, OpTimeout: 5 * time.Second, LinTimeout: 30 * time.Second,
		Workloads: []string{wMutex}, Clients: 4, Nodes: 3, Seed: 1, Out: out, Bin: bin, Log: &testLog{t: t},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	caught := map[string]bool{}
	for _, r := range res {
		caught[r.Name] = !r.Valid
	}
	if !caught[cMutex] || !caught[cLin] {
		t.Errorf("the broken node was not caught: mutual exclusion invalid %v, linearizability invalid %v", caught[cMutex], caught[cLin])
	}
}

// TestDockerShortChaos drives the docker compose cluster (build the image
// first: scripts/docker-build.sh). It runs only with JEPSEN_LITE_DOCKER=1,
// as it takes the host's ports 7700-7722 and leaves the cluster running.
func TestDockerShortChaos(t *testing.T) {
	if os.Getenv("JEPSEN_LITE_DOCKER") != "1" {
		t.Skip("set JEPSEN_LITE_DOCKER=1 to run against docker compose")
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := outDir(t)
	cfg := config{
		Time: 30 * time.Second, TTL: 4 * time.Second, OpTimeout: 10 * time.Second, LinTimeout: time.Minute,
		Nemeses:   []string{nKill, nPause, nPauseClient, nIsolateLeader, nSplit},
		Workloads: allWorkloads, Clients: 14, ClientProcs: 2, Nodes: 3, Seed: time.Now().UnixNano(), Out: out,
		Docker: true, Compose: root + "/docker-compose.yml", Log: &testLog{t: t},
	}
	cfg.Recovery = cfg.settle() + 6*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if !r.Valid {
			t.Errorf("checker %s failed: %d violations, e.g. %v", r.Name, r.Count, r.Violations[:min(3, len(r.Violations))])
		}
	}
}

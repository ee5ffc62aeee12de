//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/proccluster"
	"github.com/lockcluster/lockcluster/internal/testutil"
)

// Full disks, with real processes: each node's data directory is a small
// tmpfs of its own, filled with a ballast file (all but fullLeave bytes)
// so that raft-wal's next segment rotation fails ("rotate error: no space
// left on device").
//
// An 8 MiB volume gets 1 MiB raft-wal segments (raftnode/diskguard.go,
// segmentSizeFor), which the load fills in seconds.
const (
	fullVolume = 8 << 20
	fullLeave  = 256 << 10
	// fullBound is how long a node may take to say it is not ready once
	// its writes fail (raftnode's behindBound, 5 s, plus the time to see
	// it).
	fullBound = 8 * time.Second
)

// startOnTmpfs starts n nodes whose data directories are tmpfs mounts of
// size bytes each; it returns the cluster and the mount points. Root only:
// the test is skipped otherwise.
func startOnTmpfs(t *testing.T, n int, size uint64) (*procCluster, []string) {
	t.Helper()
	var mnts []string
	for range n {
		mnts = append(mnts, testutil.Tmpfs(t, size)) // unmounted after the nodes stop
	}
	cfg := proccluster.Config{Bin: binary(t), Nodes: n, Dir: t.TempDir(), Keep: true,
		NodeDir: func(i int) string { return filepath.Join(mnts[i], "data") }}
	return startProcsConfig(t, cfg), mnts
}

// resizeTmpfs gives the tmpfs at m a new size.
func resizeTmpfs(t *testing.T, m string, size uint64) {
	t.Helper()
	if err := syscall.Mount("tmpfs", m, "tmpfs", syscall.MS_REMOUNT, fmt.Sprintf("size=%d", size)); err != nil {
		t.Fatal(err)
	}
}

// readyzOf is a node's /readyz: status code and body (0 when it does not
// answer).
func readyzOf(httpAddr string) (int, string) {
	return httpGet(httpAddr, "/readyz")
}

func httpGet(httpAddr, path string) (int, string) {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + httpAddr + path)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func logOf(t *testing.T, p *proccluster.Node) string {
	t.Helper()
	b, err := os.ReadFile(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// lockLoad runs workers that each acquire and release a lock of their own
// until ctx ends, each through a client whose first endpoint is another
// node; it returns the count of grants.
func lockLoad(ctx context.Context, t *testing.T, addrs []string, workers int, prefix string) (*atomic.Int64, *sync.WaitGroup) {
	t.Helper()
	var grants atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		order := append(append([]string{}, addrs[w%len(addrs):]...), addrs[:w%len(addrs)]...)
		c := dialT(t, order)
		wg.Add(1)
		go func() {
			defer wg.Done()
			acquireLoop(ctx, c, fmt.Sprintf("%s-%d", prefix, w), &grants, nil)
		}()
	}
	return &grants, &wg
}

// acquireLoop acquires and releases name through c until ctx ends,
// counting grants; lastErr, if not nil, keeps the latest failure.
func acquireLoop(ctx context.Context, c *lockcluster.Client, name string, grants *atomic.Int64, lastErr *atomic.Pointer[string]) {
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		l, err := c.Acquire(actx, name, lockcluster.Options{})
		cancel()
		if err != nil {
			if lastErr != nil {
				s := err.Error()
				lastErr.Store(&s)
			}
			continue // the client retries: failover, fenced nodes
		}
		grants.Add(1)
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		l.Release(rctx)
		rcancel()
	}
}

func (pc *procCluster) pids() []int {
	var out []int
	for i := range pc.Nodes {
		out = append(out, pc.PID(i))
	}
	return out
}

// noRestart fails the test if a node's process is not the one it was.
func (pc *procCluster) noRestart(before []int) {
	pc.t.Helper()
	for i, pid := range pc.pids() {
		if pid != before[i] {
			pc.t.Fatalf("%s: process %d, was %d: it exited or restarted", pc.Nodes[i].ID, pid, before[i])
		}
	}
}

// holdsFor checks cond throughout d (polling), failing the test the first
// time it does not hold.
func holdsFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if !cond() {
			t.Fatalf("%s stopped holding", what)
		}
	}
}

// Every node's disk fills, so that raft-wal's segment rotation fails on all
// three (as on three nodes with similar disks): each node says why, once,
// naming its log's path and the free space; /readyz is 503 and
// lockcluster_replica_fenced{reason="storage"} 1 everywhere; no node
// leads and no lock is granted while the disks are full (no leader
// flapping). Once the ballast is gone the cluster grants locks again,
// with no process restarted. Before diskguard.go, every append failed
// "segment is sealed" until a restart, and /readyz said 200 on followers.
func TestFullDisksRecoverWithoutRestart(t *testing.T) {
	pc, mnts := startOnTmpfs(t, 3, fullVolume)
	pids := pc.pids()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	load, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	grants, wg := lockLoad(load, t, pc.addrs(), 8, "full")
	testutil.Eventually(t, 30*time.Second, "the load to run", func() bool { return grants.Load() >= 50 })

	var ballasts []string
	for _, m := range mnts {
		ballasts = append(ballasts, testutil.Ballast(t, m, fullLeave))
	}
	filled := time.Now()
	testutil.Eventually(t, 2*time.Minute, "every node to report its full disk and refuse clients", func() bool {
		for _, p := range pc.Nodes {
			if code, _ := readyzOf(p.HTTP); code != http.StatusServiceUnavailable || !strings.Contains(logOf(t, p), "STORAGE FAILING") {
				return false
			}
		}
		return true
	})
	t.Logf("every node fenced %v after the ballast; %d grants so far", time.Since(filled).Round(time.Millisecond), grants.Load())
	for _, p := range pc.Nodes {
		walDir := filepath.Join(p.Dir, "raft", "wal") // serve's layout
		log := logOf(t, p)
		line := log[strings.Index(log, "STORAGE FAILING"):]
		line = line[:strings.IndexByte(line, '\n')]
		for _, want := range []string{"path=" + walDir, "free=", "allocate=\"no space left on device\""} {
			if !strings.Contains(line, want) {
				t.Errorf("%s: the failure's log line does not say %q:\n%s", p.ID, want, line)
			}
		}
		if n := strings.Count(log, "STORAGE FAILING"); n != 1 {
			t.Errorf("%s logged the failure %d times, want once", p.ID, n)
		}
		if code, body := readyzOf(p.HTTP); code != http.StatusServiceUnavailable || !strings.Contains(body, walDir) || !strings.Contains(body, "cannot be written") {
			t.Errorf("%s: /readyz %d %q, want 503 naming %s", p.ID, code, body, walDir)
		}
		if _, m := httpGet(p.HTTP, "/metrics"); !strings.Contains(m, `lockcluster_replica_fenced{reason="storage"} 1`) {
			t.Errorf("%s: /metrics does not say lockcluster_replica_fenced{reason=\"storage\"} 1", p.ID)
		}
	}
	before := grants.Load()
	holdsFor(t, 3*time.Second, "no leader and no grant while every disk is full", func() bool {
		return proccluster.Leader(ctx, pc.addrs()) < 0 && grants.Load() == before
	})

	for _, b := range ballasts {
		if err := os.Remove(b); err != nil {
			t.Fatal(err)
		}
	}
	freed := time.Now()
	testutil.Eventually(t, 30*time.Second, "grants again once the disks have room", func() bool { return grants.Load() >= before+20 })
	t.Logf("granting again %v after the ballast went", time.Since(freed).Round(time.Millisecond))
	testutil.Eventually(t, 30*time.Second, "every node ready again", func() bool {
		for _, p := range pc.Nodes {
			if code, _ := readyzOf(p.HTTP); code != http.StatusOK {
				return false
			}
		}
		return true
	})
	stopLoad()
	wg.Wait()
	pc.noRestart(pids)
	for _, p := range pc.Nodes {
		if !strings.Contains(logOf(t, p), "the raft log takes writes again") {
			t.Errorf("%s did not log that its log takes writes again", p.ID)
		}
	}
}

// One follower's disk fills while the others have room: within the bound
// its /readyz says 503, its clients' session streams move to another node
// and their grants arrive (a client whose first endpoint is that follower
// keeps acquiring and releasing a lock); once the ballast is gone it
// catches up and is ready again, with no restart. Before diskguard.go and
// behind.go it said 200 all along, stuck at one applied index, and its
// clients' grants were never delivered.
func TestFullFollowerHandsItsClientsOver(t *testing.T) {
	pc, mnts := startOnTmpfs(t, 3, fullVolume)
	pids := pc.pids()
	leader := pc.leader(15 * time.Second)
	f := (leader + 1) % 3
	for i, m := range mnts { // the others have room (their segments stay 1 MiB)
		if i != f {
			resizeTmpfs(t, m, 96<<20)
		}
	}
	fp := pc.Nodes[f]
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	load, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	_, wg := lockLoad(load, t, pc.addrs(), 6, "load")

	addrs := []string{fp.GRPC}
	for i, p := range pc.Nodes {
		if i != f {
			addrs = append(addrs, p.GRPC)
		}
	}
	client := dialT(t, addrs)
	var mine atomic.Int64
	var lastErr atomic.Pointer[string]
	wg.Add(1)
	go func() {
		defer wg.Done()
		acquireLoop(load, client, "follower-client", &mine, &lastErr)
	}()
	testutil.Eventually(t, 30*time.Second, "grants to the follower's client", func() bool { return mine.Load() >= 10 })

	ballast := testutil.Ballast(t, mnts[f], fullLeave)
	testutil.Eventually(t, 2*time.Minute, fp.ID+"'s writes to fail", func() bool { return strings.Contains(logOf(t, fp), "STORAGE FAILING") })
	failed := time.Now()
	testutil.Eventually(t, fullBound, fp.ID+"'s /readyz to say 503", func() bool {
		code, _ := readyzOf(fp.HTTP)
		return code == http.StatusServiceUnavailable
	})
	t.Logf("%s not ready %v after its writes failed", fp.ID, time.Since(failed).Round(time.Millisecond))
	// It still answers Status, saying why it serves no clients: members
	// shows it fenced, not unreachable, and status fails naming it.
	testutil.Eventually(t, 15*time.Second, "members to show "+fp.ID+" fenced: disk full", func() bool {
		out, _ := run(t, pc, "members")
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, fp.ID+" ") && strings.HasSuffix(strings.TrimSpace(line), "fenced: disk full") {
				return true
			}
		}
		return false
	})
	if out, code := run(t, pc, "status"); code != exitFailure || !strings.Contains(out, fp.ID+" ("+fp.GRPC+") is fenced") {
		t.Errorf("status with %s's disk full: exit %d: %s", fp.ID, code, out)
	}
	m0 := mine.Load()
	testutil.Eventually(t, 30*time.Second, "grants to the follower's client through another node", func() bool { return mine.Load() >= m0+10 })
	t.Logf("%d more grants to the follower's client %v after it failed", mine.Load()-m0, time.Since(failed).Round(time.Millisecond))
	for i, p := range pc.Nodes {
		if i == f {
			continue
		}
		if code, body := readyzOf(p.HTTP); code != http.StatusOK {
			t.Errorf("%s, whose disk has room: /readyz %d %q", p.ID, code, body)
		}
	}

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	testutil.Eventually(t, 60*time.Second, fp.ID+" ready again", func() bool {
		code, _ := readyzOf(fp.HTTP)
		return code == http.StatusOK
	})
	t.Logf("%s ready %v after the ballast went", fp.ID, time.Since(freed).Round(time.Millisecond))
	m1 := mine.Load()
	testutil.Eventually(t, 30*time.Second, "grants to the follower's client", func() bool { return mine.Load() >= m1+5 })
	stopLoad()
	wg.Wait()
	if err := pc.CaughtUp(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	pc.noRestart(pids)
	log := logOf(t, fp)
	t.Logf("%s logged the failure %d times, raft's \"failed to append to logs\" %d times", fp.ID,
		strings.Count(log, "STORAGE FAILING"), strings.Count(log, "failed to append to logs"))
	if s := lastErr.Load(); s != nil {
		t.Logf("the follower's client's last failed acquire: %s", *s)
	}
}

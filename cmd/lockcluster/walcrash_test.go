package main

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/testutil"
)

// The log store's crash path (raft-wal): a leader SIGKILLed under a
// contended load leaves an uncommitted tail that raft trims when the node
// restarts (raft-wal v0.4.0 could then fail to start: "sealed segment has no
// index block", raft-wal#31). Three such kills in a row, then all three
// nodes killed at once and restarted: every node comes back, with the
// cluster's state, and the replicas' applied hashes agree (the cleanup
// compares them).
func TestKillLeaderUnderLoadThenWholeCluster(t *testing.T) {
	pc := startProcs(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	load, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var pairs sync.Map
	for w := range 6 {
		c := dialT(t, pc.addrs())
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for load.Err() == nil {
				actx, acancel := context.WithTimeout(load, 5*time.Second)
				l, err := c.Acquire(actx, "hot", lockcluster.Options{})
				acancel()
				if err != nil {
					continue // failover: the client retries
				}
				l.Release(ctx)
				n++
				pairs.Store(w, n)
			}
		}()
	}
	progress := func() int {
		total := 0
		pairs.Range(func(_, v any) bool { total += v.(int); return true })
		return total
	}

	for round := range 3 {
		leader := pc.leader(15 * time.Second)
		before := progress()
		testutil.Eventually(t, 30*time.Second, "the load to run", func() bool { return progress() >= before+20 })
		pc.kill(leader)
		testutil.Eventually(t, 30*time.Second, fmt.Sprintf("round %d: a new leader and progress without node %d", round, leader), func() bool {
			return progress() >= before+40
		})
		pc.start(leader)
		testutil.Eventually(t, 30*time.Second, fmt.Sprintf("round %d: node %d back", round, leader), func() bool {
			a, err := lockcluster.DialAdmin(pc.addrs())
			if err != nil {
				return false
			}
			defer a.Close()
			sctx, scancel := context.WithTimeout(ctx, time.Second)
			defer scancel()
			sts := a.Status(sctx)
			return len(sts) == 3 && sts[leader].Err == "" && sts[leader].Unfit == ""
		})
	}
	stopLoad()
	wg.Wait()

	probe := dialT(t, pc.addrs())
	held, err := probe.Acquire(ctx, "kept", lockcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pc.restartAll(syscall.SIGKILL)
	pc.leader(30 * time.Second)
	for i, p := range pc.Nodes {
		if !pc.Running(i) {
			t.Fatalf("%s did not come back after kill -9 of the whole cluster (see its log)", p.ID)
		}
	}
	q, err := probe.Query(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Held) != 1 || q.Held[0].Name != "kept" || q.Held[0].Token != held.Token() {
		t.Fatalf("after killing the whole cluster: %+v, want only %q with token %d", q.Held, "kept", held.Token())
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("release after the restart: %v", err)
	}
}

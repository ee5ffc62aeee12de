package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/testutil"
)

// Kill the leader (SIGKILL) while locks are held and requests are queued:
// nothing is lost, no session expires because of it, the queued request is
// granted after the failover, and a new request made after the kill is
// granted (how soon is the failover benchmark's to measure: 'lockcluster
// bench --workload failover').
func TestKillLeaderLosesNothing(t *testing.T) {
	pc := startProcs(t, 3)
	// A short TTL, so that the test can wait out a whole TTL after the
	// failover; it must still outlast the election.
	const ttl = 3 * time.Second
	opt := lockcluster.WithTTL(ttl)
	holder, waiter, other := dialT(t, pc.addrs(), opt), dialT(t, pc.addrs(), opt), dialT(t, pc.addrs(), opt)
	sessions := []uint64{holder.SessionID(), waiter.SessionID(), other.SessionID()}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	held, err := holder.Acquire(ctx, "x", lockcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	queued := make(chan *lockcluster.Lock, 1)
	go func() {
		l, err := waiter.Acquire(ctx, "x", lockcluster.Options{})
		if err != nil {
			t.Error(err)
		}
		queued <- l
	}()
	testutil.Eventually(t, 10*time.Second, "the waiter to queue", func() bool {
		q, err := other.Query(ctx)
		return err == nil && len(q.Pending) == 1
	})
	before, _ := other.Query(ctx)

	leader := pc.leader(5 * time.Second)
	killed := time.Now()
	pc.kill(leader)

	// A new request, made after the kill, is granted before the test's
	// deadline, and after the lock held through the failover (its fencing
	// token is newer).
	l, err := other.Acquire(ctx, "fresh", lockcluster.Options{})
	if err != nil {
		t.Fatalf("no grant after the leader's death before the test's deadline: %v", err)
	}
	if l.Token() <= held.Token() {
		t.Errorf("the grant after the kill has token %d, not after the held lock's %d", l.Token(), held.Token())
	}
	t.Logf("first grant %s after the kill", time.Since(killed).Round(time.Millisecond))
	l.Release(ctx)

	// The held lock and the queue survived, and no session expired.
	after, err := other.Query(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Held) != 1 || after.Held[0].Token != held.Token() || len(after.Pending) != 1 || after.Pending[0].SessionID != before.Pending[0].SessionID {
		t.Fatalf("state after failover: %+v, before: %+v", after, before)
	}
	select {
	case <-held.Done():
		t.Fatalf("the holder lost its lock in the failover: %v", held.Err())
	default:
	}
	// The queued request is granted when the holder releases.
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var granted *lockcluster.Lock
	select {
	case granted = <-queued:
		if granted == nil || granted.Token() <= held.Token() {
			t.Fatalf("queued lock %+v", granted)
		}
	case <-ctx.Done():
		t.Fatal("the queued request was not granted after the failover before the test's deadline")
	}
	// No session expired, even a whole TTL after the failover: the new
	// leader re-armed every session with a full TTL.
	testutil.Eventually(t, 2*ttl, "a TTL to pass since the failover", func() bool { return time.Since(killed) > ttl+time.Second })
	for i, c := range []*lockcluster.Client{holder, waiter, other} {
		if c.SessionID() != sessions[i] {
			t.Errorf("client %d's session %d ended; it is now on session %d", i, sessions[i], c.SessionID())
		}
	}
	if err := granted.Err(); err != nil {
		t.Errorf("the waiter's lock was lost after the failover: %v", err)
	}
}

// SIGTERM on the leader hands leadership over first: a client working in a
// loop sees no error, at most a retry, and goes on under the new leader.
func TestGracefulLeaderShutdown(t *testing.T) {
	pc := startProcs(t, 3)
	c := dialT(t, pc.addrs())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stop := make(chan struct{})
	type result struct {
		errs    int
		slowest time.Duration
		lastErr error
	}
	var ops atomic.Int64
	done := make(chan result, 1)
	go func() {
		var r result
		for {
			select {
			case <-stop:
				done <- r
				return
			default:
			}
			t0 := time.Now()
			err := c.Request(ctx, "loop", lockcluster.Options{}, func(context.Context, *lockcluster.Lock) error { return nil })
			r.slowest = max(r.slowest, time.Since(t0))
			ops.Add(1)
			if err != nil {
				r.errs++
				r.lastErr = err
			}
		}
	}()
	leader := pc.leader(5 * time.Second)
	testutil.Eventually(t, 30*time.Second, "the loop to run", func() bool { return ops.Load() >= 5 })
	pc.terminate(leader)
	next := pc.leader(30 * time.Second)
	// The loop goes on under the new leader: operations that began after
	// it was elected complete.
	after := ops.Load() + 1
	testutil.Eventually(t, 30*time.Second, "the loop to go on under the new leader", func() bool { return ops.Load() >= after+20 })
	close(stop)
	r := <-done
	t.Logf("%d operations, slowest %s; node %d led, then node %d", ops.Load(), r.slowest.Round(time.Millisecond), leader, next)
	if r.errs > 0 {
		t.Fatalf("%d of %d operations failed across a graceful leader shutdown; last: %v", r.errs, ops.Load(), r.lastErr)
	}
	if next == leader {
		t.Fatalf("node %d leads after it was stopped", next)
	}
}

// A paused node (SIGSTOP, a GC pause, docker pause) neither refuses nor
// answers: a client that talks to it moves to another endpoint within a
// few seconds instead of waiting for its whole deadline.
func TestPausedEndpointIsLeftBehind(t *testing.T) {
	pc := startProcs(t, 3)
	leader := pc.leader(5 * time.Second)
	paused := (leader + 1) % 3
	t0 := time.Now()
	pc.directoryComplete(10 * time.Second) // so the follower can forward from the start
	t.Logf("directory complete after %s", time.Since(t0))
	addrs := append([]string{pc.Nodes[paused].GRPC}, pc.addrs()...)
	c := dialT(t, addrs)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Request(ctx, "p", lockcluster.Options{}, func(context.Context, *lockcluster.Lock) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := pc.Pause(paused); err != nil {
		t.Fatal(err)
	}
	defer pc.Resume(paused)
	testutil.Eventually(t, 5*time.Second, "the node to stop", func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pc.PID(paused)))
		f := strings.Fields(string(b))
		return len(f) > 2 && f[2] == "T"
	})
	// Each request gets a deadline of its own: a client that waited on the
	// paused endpoint for its whole deadline would fail with it. That it
	// succeeds is the proof that it moved on first.
	for i := 0; i < 3; i++ {
		t0 := time.Now()
		rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
		err := c.Request(rctx, "p", lockcluster.Options{}, func(context.Context, *lockcluster.Lock) error { return nil })
		rcancel()
		if err != nil {
			t.Fatalf("request %d with its endpoint paused did not get past it before its deadline: %v", i, err)
		}
		t.Logf("request %d with the endpoint paused: %s", i, time.Since(t0).Round(time.Millisecond))
	}
}

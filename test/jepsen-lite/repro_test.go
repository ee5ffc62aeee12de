package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
)

// TestReproJeopardyRace reproduces a bug the chaos runs found (see
// docs/chaos.md, "Findings"): a client whose session stream is on a node
// cut off from the leader stops getting heartbeats acknowledged; the leader
// expires the session a TTL after the last heartbeat it received and grants
// the lock to the next in line, while the holder's client, which checks
// jeopardy only every TTL/20, cancels the lock's context later. Run with
// JEPSEN_LITE_REPRO=1 (and JEPSEN_LITE_REPRO_TTL, default 2s); it reports
// each round in which the waiter was granted the lock before the holder
// learned it had lost it.
func TestReproJeopardyRace(t *testing.T) {
	if os.Getenv("JEPSEN_LITE_REPRO") != "1" {
		t.Skip("a reproduction of a known bug; set JEPSEN_LITE_REPRO=1")
	}
	dir := t.TempDir()
	bin, err := buildBinary(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "nodes"), 0o755); err != nil {
		t.Fatal(err)
	}
	lc, err := newLocalCluster(bin, filepath.Join(dir, "nodes"), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	ctx := context.Background()
	if err := lc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ttl := 2 * time.Second
	if d, err := time.ParseDuration(os.Getenv("JEPSEN_LITE_REPRO_TTL")); err == nil {
		ttl = d
	}
	races := 0
	for round := range 10 {
		if err := waitReady(ctx, lc, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		l := leader(ctx, lc)
		f := (l + 1) % 3
		holder, err := lockcluster.Dial(ctx, []string{lc.Endpoints()[f]}, lockcluster.WithNamespace("repro"), lockcluster.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		waiter, err := lockcluster.Dial(ctx, []string{lc.Endpoints()[l]}, lockcluster.WithNamespace("repro"), lockcluster.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		lk, err := holder.Acquire(ctx, "x", lockcluster.Options{})
		if err != nil {
			t.Fatal(err)
		}
		lost := make(chan time.Time, 1)
		context.AfterFunc(lk.Context(), func() { lost <- time.Now() })
		granted := make(chan time.Time, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 4*ttl)
			defer cancel()
			if wl, err := waiter.Acquire(wctx, "x", lockcluster.Options{}); err == nil {
				granted <- time.Now()
				wl.Release(ctx)
			}
		}()
		// Cut the holder's node off from the leader: it soon knows no leader
		// and cannot renew the holder's session.
		cut := square(3)
		cut[f][l], cut[l][f] = true, true
		lc.Net().Cut(cut)
		var g, c time.Time
		for g.IsZero() || c.IsZero() {
			select {
			case g = <-granted:
			case c = <-lost:
			case <-time.After(6 * ttl):
				t.Fatalf("round %d: no grant or no loss within %s", round, 6*ttl)
			}
		}
		if g.Before(c) {
			races++
			t.Logf("round %d: the waiter was granted %s BEFORE the holder's lock context was cancelled", round, c.Sub(g))
		} else {
			t.Logf("round %d: the holder learned of the loss %s before the grant", round, g.Sub(c))
		}
		lc.Net().Heal()
		holder.Close(ctx)
		waiter.Close(ctx)
	}
	if races > 0 {
		t.Errorf("%d of 10 rounds: the lock was granted to another client before its holder learned it had lost it", races)
	}
}

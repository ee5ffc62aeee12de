package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/testutil"
)

// A limiter's rate and burst change in place: the buckets stay, cut to a
// smaller burst; a rate of 0 bounds nothing, and a rate set later bounds
// again.
func TestReloadRateLimiter(t *testing.T) {
	r := newRateLimiter[string](0, 0)
	t0 := time.Unix(100, 0)
	for i := range 100 {
		if ok, _ := r.take("ns", t0, 1); !ok {
			t.Fatalf("take %d refused without a rate", i)
		}
	}
	r.set(10, 3)
	if rate, burst := r.limits(); rate != 10 || burst != 3 || !r.on() {
		t.Fatalf("after set(10, 3): %g, %g, on %v", rate, burst, r.on())
	}
	for i := range 3 {
		if ok, _ := r.take("ns", t0, 1); !ok {
			t.Fatalf("take %d within the new burst refused", i)
		}
	}
	if ok, wait := r.take("ns", t0, 1); ok || wait != 100*time.Millisecond {
		t.Fatalf("past the burst: %v, wait %s; want a refusal and 100ms", ok, wait)
	}
	r.set(100, 1) // the empty bucket refills at the new rate
	if ok, _ := r.take("ns", t0.Add(10*time.Millisecond), 1); !ok {
		t.Fatal("10ms at 100 a second earned no token")
	}
	r.set(0, 0)
	if ok, _ := r.take("ns", t0.Add(10*time.Millisecond), 50); !ok || r.on() {
		t.Fatal("a rate of 0 still bounds")
	}
}

// A reload changes a namespace's write rate on the node at once, with the
// buckets it has.
func TestReloadNamespaceRate(t *testing.T) {
	fc := newFakeCluster(t, 1, fakeOptions{})
	ctx := testCtx(t)
	n := fc.node("n1")
	s := n.open(t, "ns")
	for i := uint64(1); i <= 5; i++ {
		if _, err := n.request(ctx, s, "ns", i, fmt.Sprint("a", i)); err != nil {
			t.Fatalf("write %d without a rate: %v", i, err)
		}
	}
	n.srv.Reload(Settings{NamespaceRate: 1, NamespaceBurst: 2})
	for i := uint64(6); i <= 7; i++ {
		if _, err := n.request(ctx, s, "ns", i, fmt.Sprint("a", i)); err != nil {
			t.Fatalf("write %d within the new burst: %v", i, err)
		}
	}
	_, err := n.request(ctx, s, "ns", 8, "a8")
	wantQuotaRefusal(t, err, "ns", "write rate limit of 1 per second (burst 2)")
	n.srv.Reload(Settings{})
	if _, err := n.request(ctx, s, "ns", 9, "a9"); err != nil {
		t.Fatalf("after a reload that lifts the rate: %v", err)
	}
}

// The leader proposes the limits a reload gives it at once; a follower
// keeps them for when it leads.
func TestReloadProposesLimitsOnTheLeader(t *testing.T) {
	first := fsm.DefaultLimits()
	first.MaxHeldPerSession = 100
	fc := newFakeCluster(t, 2, fakeOptions{configure: func(c *Config) { l := first; c.Limits = &l }})
	inForce := func(want fsm.Limits) func() bool {
		return func() bool {
			for _, n := range fc.nodes {
				if n.m.Limits() != want {
					return false
				}
			}
			return true
		}
	}
	testutil.Eventually(t, 5*time.Second, "the leader's limits at start", inForce(first))

	second := first
	second.MaxHeldPerSession = 200
	fc.node("n1").srv.Reload(Settings{Limits: &second})
	testutil.Eventually(t, 5*time.Second, "the limits the leader was reloaded with", inForce(second))

	third := first
	third.MaxHeldPerSession = 300
	fc.node("n2").srv.Reload(Settings{Limits: &third}) // a follower: nothing proposed
	fc.node("n1").srv.Reload(Settings{Limits: &second})
	fc.elect("n2")
	testutil.Eventually(t, 5*time.Second, "the follower's reloaded limits once it leads", inForce(third))
}

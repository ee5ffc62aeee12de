package session

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func testDeadlines(clock *fakeClock) *deadlines {
	return newTable(Config{Tick: 10 * time.Millisecond, Now: clock.Now, Expirer: &recorder{}})
}

func TestDeadlinesFollowHeartbeats(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	tr := testDeadlines(clock)
	lead(tr, []Info{{ID: 1, TTL: time.Second}, {ID: 2, TTL: 2 * time.Second}})

	clock.Advance(999 * time.Millisecond)
	if due := tr.Due(clock.Now()); len(due) != 0 {
		t.Fatalf("due before any TTL passed: %v", due)
	}
	if unknown, st := tr.Touch(1); st != leading || len(unknown) != 0 {
		t.Fatalf("touch: unknown=%v state=%v", unknown, st)
	}
	clock.Advance(2 * time.Millisecond) // session 1 was renewed at 999ms
	if due := tr.Due(clock.Now()); len(due) != 0 {
		t.Fatalf("renewed session expired: %v", due)
	}
	clock.Advance(time.Second)
	if due := tr.Due(clock.Now()); !slices.Equal(due, []uint64{1, 2}) && !slices.Equal(due, []uint64{2, 1}) {
		t.Fatalf("due after both deadlines: %v", due)
	}
	// An expiring session is not revived by a late heartbeat, and not
	// reported twice.
	tr.Touch(1)
	clock.Advance(5 * time.Second)
	if due := tr.Due(clock.Now()); len(due) != 0 {
		t.Fatalf("due twice: %v", due)
	}
	tr.Ended(1)
	if unknown, _ := tr.Touch(1); !slices.Equal(unknown, []uint64{1}) {
		t.Fatalf("ended session is known: %v", unknown)
	}
}

func TestOpenedArmsAndFollowStops(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	tr := testDeadlines(clock)
	tr.Opened(7, time.Second) // not leading: ignored
	if _, st := tr.Touch(7); st == leading {
		t.Fatal("touch accepted by a follower")
	}
	lead(tr, nil)
	tr.Opened(7, time.Second)
	clock.Advance(2 * time.Second)
	if due := tr.Due(clock.Now()); !slices.Equal(due, []uint64{7}) {
		t.Fatalf("due %v", due)
	}
	tr.Follow()
	if tr.current() == leading {
		t.Fatal("still leading")
	}
	clock.Advance(time.Hour)
	if due := tr.Due(clock.Now()); len(due) != 0 {
		t.Fatalf("follower expires: %v", due)
	}
}

// A new leader gives every session a full TTL from when it took over, so a
// session whose last heartbeat reached the old leader long ago survives.
func TestLeadRearmsWithFullTTL(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	tr := testDeadlines(clock)
	lead(tr, []Info{{ID: 1, TTL: time.Second}})
	clock.Advance(900 * time.Millisecond)
	tr.Follow()
	clock.Advance(900 * time.Millisecond) // the election
	lead(tr, []Info{{ID: 1, TTL: time.Second}})
	clock.Advance(990 * time.Millisecond)
	if due := tr.Due(clock.Now()); len(due) != 0 {
		t.Fatalf("expired within a TTL of the new term: %v", due)
	}
	clock.Advance(20 * time.Millisecond)
	if due := tr.Due(clock.Now()); !slices.Equal(due, []uint64{1}) {
		t.Fatalf("due %v", due)
	}
}

type recorder struct {
	mu    sync.Mutex
	calls []uint64
	fail  int // fail this many calls first
}

func (r *recorder) Expire(ctx context.Context, id uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, id)
	if r.fail > 0 {
		r.fail--
		return errors.New("not applied")
	}
	return nil
}

func (r *recorder) seen() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// newTable is a deadline table with cfg's defaults filled in.
func newTable(cfg Config) *deadlines { return newDeadlines(cfg.withDefaults()) }

// lead makes tr lead with sessions, as a Lead whose barrier succeeded.
func lead(tr *deadlines, sessions []Info) {
	if !tr.arm(tr.begin(), sessions) {
		panic("arm refused right after begin")
	}
}

func TestRunProposesExpiryAndRetries(t *testing.T) {
	defer goleak.VerifyNone(t)
	rec := &recorder{fail: 2}
	tr := newTable(Config{Tick: 5 * time.Millisecond, Expirer: rec})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tr.Run(ctx); close(done) }()
	lead(tr, []Info{{ID: 3, TTL: 50 * time.Millisecond}, {ID: 4, TTL: time.Hour}})
	testutil.Eventually(t, 5*time.Second, "three expiry proposals", func() bool { return len(rec.seen()) >= 3 })
	if calls := rec.seen(); !slices.Equal(calls, []uint64{3, 3, 3}) {
		t.Fatalf("expiry calls %v: want session 3 tried until it succeeded", calls)
	}
	if unknown, _ := tr.Touch(3); !slices.Equal(unknown, []uint64{3}) {
		t.Fatal("expired session still tracked")
	}
	cancel()
	<-done
	if tr.current() == leading {
		t.Fatal("Run ended but the tracker still leads")
	}
}

// Losing leadership stops an expiry that keeps failing.
func TestFollowStopsRetries(t *testing.T) {
	defer goleak.VerifyNone(t)
	rec := &recorder{fail: 1 << 30}
	tr := newTable(Config{Tick: 5 * time.Millisecond, Expirer: rec})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tr.Run(ctx); close(done) }()
	lead(tr, []Info{{ID: 9, TTL: 20 * time.Millisecond}})
	testutil.Eventually(t, 5*time.Second, "two expiry proposals", func() bool { return len(rec.seen()) >= 2 })
	tr.Follow()
	// Run stops, and goleak (deferred) checks that the retrying expiry
	// goroutine ended with the term.
	cancel()
	<-done
}

// A deadline that falls inside a tick fires at the end of that tick: never
// before the deadline, and never lost because a slot was visited early.
func TestDeadlineInsideATickFiresOnce(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	tr := newTable(Config{Tick: 100 * time.Millisecond, Now: clock.Now, Expirer: &recorder{}})
	lead(tr, []Info{{ID: 1, TTL: 1050 * time.Millisecond}}) // due at 1001.05
	clock.Advance(1010 * time.Millisecond)                  // 1001.01, same tick
	if due := tr.Due(clock.Now()); len(due) != 0 {
		t.Fatalf("expired before its deadline: %v", due)
	}
	clock.Advance(100 * time.Millisecond) // 1001.11: the tick has ended
	if due := tr.Due(clock.Now()); !slices.Equal(due, []uint64{1}) {
		t.Fatalf("due %v, want [1]", due)
	}
}

// blocker is an Expirer whose calls wait until released, counting how many
// are in flight at once.
type blocker struct {
	mu        sync.Mutex
	now, most int
	done      int
	release   chan struct{}
}

func (b *blocker) Expire(ctx context.Context, id uint64) error {
	b.mu.Lock()
	b.now++
	b.most = max(b.most, b.now)
	b.mu.Unlock()
	<-b.release
	b.mu.Lock()
	b.now--
	b.done++
	b.mu.Unlock()
	return nil
}

func (b *blocker) stats() (now, most, done int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.now, b.most, b.done
}

// A mass expiry proposes at most maxExpiring at once, and every session
// still gets its expiry.
func TestMassExpiryIsBounded(t *testing.T) {
	defer goleak.VerifyNone(t)
	b := &blocker{release: make(chan struct{})}
	tr := newTable(Config{Tick: 5 * time.Millisecond, Expirer: b})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tr.Run(ctx); close(done) }()
	const n = 3 * maxExpiring
	var ss []Info
	for i := range n {
		ss = append(ss, Info{ID: uint64(i + 1), TTL: 20 * time.Millisecond})
	}
	lead(tr, ss)
	testutil.Eventually(t, 10*time.Second, "maxExpiring expiries in flight", func() bool { now, _, _ := b.stats(); return now == maxExpiring })
	close(b.release)
	testutil.Eventually(t, 10*time.Second, "every expiry done", func() bool { _, _, d := b.stats(); return d == n })
	if _, most, _ := b.stats(); most > maxExpiring {
		t.Fatalf("%d expiries proposed at once; the bound is %d", most, maxExpiring)
	}
	cancel()
	<-done
}

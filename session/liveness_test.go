package session

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// These tests run Liveness on fakes of its interfaces inside a synctest
// bubble: time is virtual and moves only when every goroutine of the
// bubble waits, so a sleep of the test goroutine is an exact step.

// fakeLog's barrier fails its first fail calls, then waits for gate
// (when set) and succeeds. Its confirmations count themselves, wait for a
// value on release (when set) and fail with confirmErr (when set).
type fakeLog struct {
	mu         sync.Mutex
	fail       int
	gate       chan struct{}
	barriers   int
	reads      int
	sessions   []Info
	confirms   int
	release    chan struct{}
	confirmErr error
}

func (r *fakeLog) Confirm(ctx context.Context) error {
	r.mu.Lock()
	r.confirms++
	release := r.release
	r.mu.Unlock()
	if release != nil {
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.confirmErr
}

func (r *fakeLog) confirmations() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.confirms
}

func (r *fakeLog) Barrier(ctx context.Context) error {
	r.mu.Lock()
	r.barriers++
	failing := r.fail > 0
	if failing {
		r.fail--
	}
	gate := r.gate
	r.mu.Unlock()
	if failing {
		return errors.New("not leader any more")
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (r *fakeLog) Sessions() []Info {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads++
	return slices.Clone(r.sessions)
}

func (r *fakeLog) counts() (barriers, reads int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.barriers, r.reads
}

// fakeForwarder records the batches it carries and when; the leader does
// not know the ids in unknown, refuses those in moved (their slot moves),
// and err fails every batch. It answers each list in descending order:
// the batcher must not rely on the leader's order.
type fakeForwarder struct {
	mu      sync.Mutex
	calls   [][]uint64
	at      []time.Time
	unknown []uint64
	moved   []uint64
	err     error
}

func (f *fakeForwarder) Touch(ctx context.Context, ids []uint64) (unknown, moved []uint64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, slices.Clone(ids))
	f.at = append(f.at, time.Now())
	if f.err != nil {
		return nil, nil, f.err
	}
	for _, id := range slices.Backward(ids) {
		switch {
		case slices.Contains(f.moved, id):
			moved = append(moved, id)
		case slices.Contains(f.unknown, id):
			unknown = append(unknown, id)
		}
	}
	return unknown, moved, nil
}

func (f *fakeForwarder) batches() [][]uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

type rig struct {
	l   *Liveness
	rep *fakeLog
	fwd *fakeForwarder
	rec *recorder
}

// start runs a Liveness on fakes until the test ends.
func start(t *testing.T, rep *fakeLog) *rig {
	r := &rig{rep: rep, fwd: &fakeForwarder{}, rec: &recorder{}}
	r.l = New(Config{Expirer: r.rec, Log: rep, Forwarder: r.fwd, Tick: 10 * time.Millisecond, Flush: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func TestExpiryIsTTLPlusGrace(t *testing.T) {
	for _, c := range []struct{ ttl, want time.Duration }{
		{10 * time.Second, 11 * time.Second},
		{4 * time.Second, 4400 * time.Millisecond},
		{500 * time.Millisecond, 550 * time.Millisecond},
		{200 * time.Millisecond, 250 * time.Millisecond}, // the 50 ms floor
	} {
		if got := Expiry(c.ttl); got != c.want {
			t.Errorf("Expiry(%s) = %s, want %s", c.ttl, got, c.want)
		}
	}
}

// A follower gathers the heartbeats of one Flush and forwards them in one
// call, each session once; a session the leader does not know is reported
// as ended to each of its heartbeats, the others as renewed.
func TestFollowerBatchesHeartbeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := start(t, &fakeLog{})
		r.fwd.unknown = []uint64{7}
		begin := time.Now()
		const n = 100
		known := make([]bool, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { known[i], errs[i] = r.l.Heartbeat(t.Context(), uint64(i%50+1)) })
		}
		wg.Wait()
		calls := r.fwd.batches()
		if len(calls) != 1 {
			t.Fatalf("%d heartbeats made %d forwarded calls, want 1: %v", n, len(calls), calls)
		}
		want := make([]uint64, 50)
		for i := range want {
			want[i] = uint64(i + 1)
		}
		if !slices.Equal(calls[0], want) {
			t.Fatalf("forwarded %v, want every session once: %v", calls[0], want)
		}
		if waited := r.fwd.at[0].Sub(begin); waited != 20*time.Millisecond {
			t.Fatalf("forwarded after %s, want one Flush (20ms)", waited)
		}
		for i := range n {
			if errs[i] != nil || known[i] != (i%50+1 != 7) {
				t.Fatalf("heartbeat %d of session %d: known=%v err=%v", i, i%50+1, known[i], errs[i])
			}
		}
	})
}

// A session the leader refused because its slot moves (groups.md §8.2)
// is answered ErrMoved, to each of its heartbeats: neither renewed nor
// ended; the others of the batch are renewed or ended as before.
func TestFollowerBatchReportsMovedSessions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := start(t, &fakeLog{})
		r.fwd.unknown = []uint64{7}
		r.fwd.moved = []uint64{3, 12, 40}
		const n = 100
		known := make([]bool, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { known[i], errs[i] = r.l.Heartbeat(t.Context(), uint64(i%50+1)) })
		}
		wg.Wait()
		if calls := r.fwd.batches(); len(calls) != 1 {
			t.Fatalf("%d forwarded calls, want 1", len(calls))
		}
		for i := range n {
			id := uint64(i%50 + 1)
			switch {
			case slices.Contains(r.fwd.moved, id):
				if known[i] || !errors.Is(errs[i], ErrMoved) || errors.Is(errs[i], ErrNotLeading) {
					t.Fatalf("heartbeat %d of moved session %d: known=%v err=%v, want ErrMoved", i, id, known[i], errs[i])
				}
			case id == 7:
				if known[i] || errs[i] != nil {
					t.Fatalf("heartbeat %d of unknown session 7: known=%v err=%v, want ended", i, known[i], errs[i])
				}
			default:
				if !known[i] || errs[i] != nil {
					t.Fatalf("heartbeat %d of session %d: known=%v err=%v, want renewed", i, id, known[i], errs[i])
				}
			}
		}
	})
}

// A follower that reaches no leader renews nothing: ErrNotLeading.
func TestFollowerWithoutLeaderSaysNotLeading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := start(t, &fakeLog{})
		r.fwd.err = errors.New("no leader known")
		known, err := r.l.Heartbeat(t.Context(), 1)
		if !errors.Is(err, ErrNotLeading) || known {
			t.Fatalf("known=%v err=%v, want ErrNotLeading", known, err)
		}
		if _, err := r.l.Renew(context.Background(), 1); !errors.Is(err, ErrNotLeading) {
			t.Fatalf("a follower renewed a forwarded batch: %v", err)
		}
	})
}

// The leader renews heartbeats itself, never forwards, and reports the
// sessions it does not know.
func TestLeaderRenewsAndReportsUnknown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := start(t, &fakeLog{sessions: []Info{{ID: 1, TTL: time.Second}, {ID: 2, TTL: time.Second}}})
		if err := r.l.Lead(t.Context()); err != nil {
			t.Fatal(err)
		}
		if known, err := r.l.Heartbeat(t.Context(), 1); !known || err != nil {
			t.Fatalf("session 1: known=%v err=%v", known, err)
		}
		if known, err := r.l.Heartbeat(t.Context(), 9); known || err != nil {
			t.Fatalf("session 9 never opened: known=%v err=%v", known, err)
		}
		if unknown, err := r.l.Renew(context.Background(), 2, 9, 1); err != nil || !slices.Equal(unknown, []uint64{9}) {
			t.Fatalf("renew: unknown=%v err=%v, want [9]", unknown, err)
		}
		if calls := r.fwd.batches(); len(calls) != 0 {
			t.Fatalf("the leader forwarded %v", calls)
		}
	})
}

// A new leader re-arms only once its barrier succeeds, retrying it; until
// then it answers no heartbeat, reads no session and expires nothing. The
// re-arm gives each session a full Expiry(TTL) from then.
func TestLeadRearmsOnlyAfterTheBarrier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := start(t, &fakeLog{fail: 2, sessions: []Info{{ID: 1, TTL: time.Second}}})
		done := make(chan error, 1)
		go func() { done <- r.l.Lead(t.Context()) }()
		synctest.Wait() // the first barrier failed; Lead waits to retry
		if known, err := r.l.Heartbeat(t.Context(), 1); !errors.Is(err, ErrNotLeading) {
			t.Fatalf("heartbeat before the re-arm: known=%v err=%v, want ErrNotLeading", known, err)
		}
		if _, err := r.l.Renew(context.Background(), 1); !errors.Is(err, ErrNotLeading) {
			t.Fatalf("renew before the re-arm: %v", err)
		}
		if barriers, reads := r.rep.counts(); barriers != 1 || reads != 0 {
			t.Fatalf("barriers=%d session reads=%d before the barrier succeeded", barriers, reads)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		armed := time.Now()
		if barriers, reads := r.rep.counts(); barriers != 3 || reads != 1 {
			t.Fatalf("barriers=%d session reads=%d, want 3 and 1", barriers, reads)
		}
		if calls := r.fwd.batches(); len(calls) != 0 {
			t.Fatalf("a leader forwarded %v", calls)
		}
		time.Sleep(Expiry(time.Second) - time.Millisecond)
		synctest.Wait()
		if calls := r.rec.seen(); len(calls) != 0 {
			t.Fatalf("expired %v %s after the re-arm, before TTL and grace", calls, time.Since(armed))
		}
		time.Sleep(10*time.Millisecond + time.Millisecond) // a tick later
		synctest.Wait()
		if calls := r.rec.seen(); !slices.Equal(calls, []uint64{1}) {
			t.Fatalf("expired %v one tick after TTL and grace, want [1]", calls)
		}
	})
}

// Losing leadership drops every deadline: nothing expires, and heartbeats
// go to the leader.
func TestFollowStopsExpiries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := start(t, &fakeLog{sessions: []Info{{ID: 1, TTL: 100 * time.Millisecond}}})
		if err := r.l.Lead(t.Context()); err != nil {
			t.Fatal(err)
		}
		r.l.Opened(2, 100*time.Millisecond)
		r.l.Follow()
		time.Sleep(time.Second)
		synctest.Wait()
		if calls := r.rec.seen(); len(calls) != 0 {
			t.Fatalf("a follower expired %v", calls)
		}
		if _, err := r.l.Heartbeat(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		if calls := r.fwd.batches(); !slices.Equal(slices.Concat(calls...), []uint64{1}) {
			t.Fatalf("forwarded %v, want [1]", calls)
		}
	})
}

// A term that ends while its barrier runs arms nothing: neither when the
// Follow comes first, nor when the term's context ends.
func TestTermEndingDuringTheBarrierArmsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rep := &fakeLog{gate: make(chan struct{}), sessions: []Info{{ID: 1, TTL: 100 * time.Millisecond}}}
		r := start(t, rep)
		done := make(chan error, 1)
		go func() { done <- r.l.Lead(t.Context()) }()
		synctest.Wait() // in the barrier
		r.l.Follow()
		close(rep.gate)
		if err := <-done; err == nil {
			t.Fatal("Lead armed after a Follow")
		}
		if _, err := r.l.Renew(context.Background(), 1); !errors.Is(err, ErrNotLeading) {
			t.Fatalf("renewed after the term ended: %v", err)
		}

		rep.mu.Lock()
		rep.fail = 1 << 30
		rep.mu.Unlock()
		ctx, cancel := context.WithCancel(t.Context())
		go func() { done <- r.l.Lead(ctx) }()
		synctest.Wait() // retrying the barrier
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Lead of an ended term: %v", err)
		}
		// Following again, not stuck re-arming: heartbeats go to the leader.
		if _, err := r.l.Heartbeat(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if calls := r.rec.seen(); len(calls) != 0 {
			t.Fatalf("expired %v without a term", calls)
		}
	})
}

// Sessions opened and ended by entries applied while the re-arm waits for
// its barrier are armed and forgotten as those entries say, whether or not
// the snapshot read after the barrier has them.
func TestSessionsChangingDuringTheRearm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rep := &fakeLog{gate: make(chan struct{}), sessions: []Info{{ID: 2, TTL: time.Second}, {ID: 3, TTL: time.Second}}}
		r := start(t, rep)
		done := make(chan error, 1)
		go func() { done <- r.l.Lead(t.Context()) }()
		synctest.Wait() // in the barrier
		r.l.Opened(5, time.Second)
		r.l.Ended(2)
		close(rep.gate)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if unknown, err := r.l.Renew(context.Background(), 2, 3, 5); err != nil || !slices.Equal(unknown, []uint64{2}) {
			t.Fatalf("after the re-arm: unknown=%v err=%v, want [2]", unknown, err)
		}
	})
}

// When Run ends, heartbeats waiting for a batch fail rather than hang.
func TestRunEndingFailsWaitingHeartbeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(Config{Expirer: &recorder{}, Log: &fakeLog{}, Forwarder: &fakeForwarder{}, Flush: time.Hour})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { l.Run(ctx); close(done) }()
		errc := make(chan error, 1)
		go func() { _, err := l.Heartbeat(t.Context(), 1); errc <- err }()
		synctest.Wait()
		cancel()
		if err := <-errc; err == nil {
			t.Fatal("a heartbeat was answered without a batch")
		}
		<-done
	})
}

// A session the applied state holds and serves but the leader's table
// lacks (a move's Import applied, its arming not yet run: Config.Served)
// is armed by the renewal, not answered ended; one the state does not
// hold still is; the adopted one then expires a full Expiry(TTL) after
// the renewal unless renewed again.
func TestRenewalArmsAServedSessionTheTableLacks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &rig{rep: &fakeLog{}, fwd: &fakeForwarder{}, rec: &recorder{}}
		served := func(id uint64) (time.Duration, bool) { return time.Second, id == 7 }
		r.l = New(Config{Expirer: r.rec, Log: r.rep, Forwarder: r.fwd, Served: served, Tick: 10 * time.Millisecond, Flush: 20 * time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { r.l.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		if err := r.l.Lead(t.Context()); err != nil {
			t.Fatal(err)
		}
		if known, err := r.l.Heartbeat(t.Context(), 7); !known || err != nil {
			t.Fatalf("session 7 (served, not in the table): known=%v err=%v, want known", known, err)
		}
		renewed := time.Now()
		if unknown, err := r.l.Renew(context.Background(), 7, 9); err != nil || !slices.Equal(unknown, []uint64{9}) {
			t.Fatalf("renew: unknown=%v err=%v, want [9]", unknown, err)
		}
		time.Sleep(time.Until(renewed.Add(Expiry(time.Second) - time.Millisecond)))
		synctest.Wait()
		if calls := r.rec.seen(); len(calls) != 0 {
			t.Fatalf("expired %v before TTL and grace", calls)
		}
		time.Sleep(20 * time.Millisecond)
		synctest.Wait()
		if calls := r.rec.seen(); !slices.Equal(calls, []uint64{7}) {
			t.Fatalf("expired %v after TTL and grace, want [7]", calls)
		}
	})
}

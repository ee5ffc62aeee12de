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

// The leader acknowledges a renewal only after a confirmation of its
// leadership that started after the renewal (DESIGN.md, "A change of
// leader"); confirmations are shared by every renewal made before they
// start, and start at most once per Flush (20 ms in these tests).

type answer struct {
	known   bool
	unknown []uint64
	err     error
}

// leader starts a Liveness that leads sessions 1 to n (TTL 1s).
func leader(t *testing.T, n int) (*rig, *fakeLog) {
	t.Helper()
	rep := &fakeLog{}
	for i := 1; i <= n; i++ {
		rep.sessions = append(rep.sessions, Info{ID: uint64(i), TTL: time.Second})
	}
	r := start(t, rep)
	if err := r.l.Lead(t.Context()); err != nil {
		t.Fatal(err)
	}
	return r, rep
}

// hold makes every confirmation wait for a value on the returned channel.
func (r *fakeLog) hold() chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.release = make(chan struct{})
	return r.release
}

func (r *fakeLog) failConfirm(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.confirmErr = err
}

func heartbeat(r *rig, t *testing.T, id uint64) <-chan answer {
	ch := make(chan answer, 1)
	go func() { known, err := r.l.Heartbeat(t.Context(), id); ch <- answer{known: known, err: err} }()
	return ch
}

func renew(r *rig, ids ...uint64) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		unknown, err := r.l.Renew(context.Background(), ids...)
		ch <- answer{unknown: unknown, err: err}
	}()
	return ch
}

// poll returns the answer on ch if there is one yet.
func poll(ch <-chan answer) (answer, bool) {
	select {
	case a := <-ch:
		return a, true
	default:
		return answer{}, false
	}
}

// renewedAt reports whether session id's deadline is Expiry(1s) from at:
// it was renewed then.
func renewedAt(r *rig, id uint64, at time.Time) bool {
	r.l.t.mu.Lock()
	defer r.l.t.mu.Unlock()
	return r.l.t.due[id].Equal(at.Add(Expiry(time.Second)))
}

// A heartbeat renewed while a confirmation is in flight is not answered by
// it: only by the next one, which starts after the renewal. Both the
// leader's own heartbeats and a forwarded batch (Renew) wait so.
func TestRenewalWaitsForAConfirmationStartedAfterIt(t *testing.T) {
	for _, forwarded := range []bool{false, true} {
		t.Run(map[bool]string{false: "heartbeat", true: "renew"}[forwarded], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, rep := leader(t, 2)
				release := rep.hold()
				begin := time.Now()
				first := heartbeat(r, t, 1)
				synctest.Wait()
				if n := rep.confirmations(); n != 1 {
					t.Fatalf("%d confirmations started for the first heartbeat, want 1 at once", n)
				}
				time.Sleep(5 * time.Millisecond)
				var second <-chan answer
				if forwarded {
					second = renew(r, 2, 9)
				} else {
					second = heartbeat(r, t, 2)
				}
				synctest.Wait()
				if !renewedAt(r, 2, time.Now()) {
					t.Fatal("session 2 was not renewed when its heartbeat arrived, before any confirmation covering it")
				}
				release <- struct{}{} // the first confirmation succeeds
				synctest.Wait()
				if a := <-first; !a.known || a.err != nil {
					t.Fatalf("first heartbeat: %+v, want acknowledged", a)
				}
				if a, ok := poll(second); ok {
					t.Fatalf("session 2 answered %+v by a confirmation that started before its renewal", a)
				}
				if n := rep.confirmations(); n != 1 {
					t.Fatalf("%d confirmations 5ms after the first: want the next one to wait one Flush", n)
				}
				time.Sleep(begin.Add(20 * time.Millisecond).Sub(time.Now()))
				synctest.Wait()
				if n := rep.confirmations(); n != 2 {
					t.Fatalf("%d confirmations one Flush after the first, want 2", n)
				}
				if a, ok := poll(second); ok {
					t.Fatalf("session 2 answered %+v before the confirmation that covers it succeeded", a)
				}
				release <- struct{}{}
				a := <-second
				if forwarded && (a.err != nil || !slices.Equal(a.unknown, []uint64{9})) {
					t.Fatalf("renew: %+v, want renewed with 9 unknown", a)
				}
				if !forwarded && (!a.known || a.err != nil) {
					t.Fatalf("second heartbeat: %+v, want acknowledged", a)
				}
				if waited := time.Since(begin); waited != 20*time.Millisecond {
					t.Fatalf("second answered %s after the first heartbeat, want one Flush", waited)
				}
			})
		})
	}
}

// A confirmation that fails acknowledges nothing it covers: ErrNotLeading,
// for a heartbeat and a forwarded batch. One that never answers fails the
// batch within the follower's bound on its call.
func TestFailedConfirmationAcksNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, rep := leader(t, 1)
		rep.failConfirm(errors.New("deposed: another node leads a newer term"))
		if known, err := r.l.Heartbeat(t.Context(), 1); !errors.Is(err, ErrNotLeading) || known {
			t.Fatalf("heartbeat: known=%v err=%v, want ErrNotLeading", known, err)
		}
		if unknown, err := r.l.Renew(context.Background(), 1, 9); !errors.Is(err, ErrNotLeading) || unknown != nil {
			t.Fatalf("renew: unknown=%v err=%v, want ErrNotLeading", unknown, err)
		}
		rep.failConfirm(nil)
		if known, err := r.l.Heartbeat(t.Context(), 1); !known || err != nil {
			t.Fatalf("heartbeat once confirmed again: known=%v err=%v", known, err)
		}

		rep.hold() // never released
		begin := time.Now()
		if _, err := r.l.Renew(context.Background(), 1); !errors.Is(err, ErrNotLeading) {
			t.Fatalf("renew with a confirmation that never answers: %v", err)
		}
		if waited := time.Since(begin); waited > touchForwardTimeout {
			t.Fatalf("renew waited %s for a confirmation, more than the follower's %s", waited, touchForwardTimeout)
		}
		// A forwarded call the follower gave up on is not waited for.
		ctx, cancel := context.WithTimeout(context.Background(), touchForwardTimeout/10)
		defer cancel()
		begin = time.Now()
		if _, err := r.l.Renew(ctx, 1); !errors.Is(err, ErrNotLeading) {
			t.Fatalf("renew whose call ends first: %v", err)
		}
		if waited := time.Since(begin); waited != touchForwardTimeout/10 {
			t.Fatalf("renew waited %s after its call's context ended at %s", waited, touchForwardTimeout/10)
		}
	})
}

// A renewal made in a term that ends before its confirmation succeeds is
// not acknowledged, even when this node leads again by then: a confirmed
// later term says nothing of the leaders in between.
func TestRenewalOfAnEndedTermIsNotAcked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, rep := leader(t, 1)
		release := rep.hold()
		hb := heartbeat(r, t, 1)
		synctest.Wait() // renewed; the confirmation waits
		r.l.Follow()
		if err := r.l.Lead(t.Context()); err != nil {
			t.Fatal(err)
		}
		release <- struct{}{}
		if a := <-hb; !errors.Is(a.err, ErrNotLeading) {
			t.Fatalf("heartbeat renewed in an ended term: %+v, want ErrNotLeading", a)
		}
	})
}

// Many heartbeats and forwarded batches on the leader share confirmations:
// those arriving together take one or two, and a steady stream takes about
// one per Flush, each answered within a Flush of its arrival.
func TestConfirmationsAreShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 1000
		r, rep := leader(t, n)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failed []answer
		for i := 1; i <= n; i++ {
			wg.Go(func() {
				var a answer
				if i%10 == 0 {
					a.unknown, a.err = r.l.Renew(context.Background(), uint64(i), uint64(i-1))
					a.known = len(a.unknown) == 0
				} else {
					a.known, a.err = r.l.Heartbeat(t.Context(), uint64(i))
				}
				if !a.known || a.err != nil {
					mu.Lock()
					failed = append(failed, a)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(failed) > 0 {
			t.Fatalf("%d of %d not acknowledged: %+v", len(failed), n, failed[0])
		}
		if c := rep.confirmations(); c > 2 {
			t.Fatalf("%d concurrent heartbeats took %d confirmations, want at most 2", n, c)
		}

		time.Sleep(100 * time.Millisecond) // idle: the next confirmation starts at once
		before := rep.confirmations()
		const spread = 100 // one heartbeat per ms for 100 ms
		for i := range spread {
			wg.Go(func() {
				sent := time.Now()
				known, err := r.l.Heartbeat(t.Context(), uint64(i+1))
				if !known || err != nil || time.Since(sent) > 20*time.Millisecond {
					mu.Lock()
					failed = append(failed, answer{known: known, err: err})
					mu.Unlock()
				}
			})
			time.Sleep(time.Millisecond)
		}
		wg.Wait()
		if len(failed) > 0 {
			t.Fatalf("%d heartbeats not acknowledged within a Flush: %+v", len(failed), failed[0])
		}
		if c := rep.confirmations() - before; c > spread/20+1 {
			t.Fatalf("%d heartbeats over %d ms took %d confirmations, want at most one per Flush", spread, spread, c)
		}
	})
}

// When Run ends, renewals waiting for a confirmation fail rather than
// hang, and a confirmation asked for later fails at once.
func TestRunEndingFailsWaitingConfirmations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rep := &fakeLog{sessions: []Info{{ID: 1, TTL: time.Second}}}
		l := New(Config{Expirer: &recorder{}, Log: rep, Forwarder: &fakeForwarder{}})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { l.Run(ctx); close(done) }()
		if err := l.Lead(t.Context()); err != nil {
			t.Fatal(err)
		}
		rep.hold() // never released
		r := &rig{l: l}
		first := heartbeat(r, t, 1)
		synctest.Wait() // in the first confirmation
		second := heartbeat(r, t, 1)
		synctest.Wait() // waiting for the next
		cancel()
		for _, ch := range []<-chan answer{first, second} {
			if a := <-ch; a.err == nil || a.known {
				t.Fatalf("a heartbeat was acknowledged after Run ended: %+v", a)
			}
		}
		<-done
		if err := l.conf.wait(t.Context()); !errors.Is(err, ErrNotLeading) {
			t.Fatalf("confirmation asked after Run ended: %v, want ErrNotLeading at once", err)
		}
	})
}

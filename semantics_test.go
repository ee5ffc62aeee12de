package lockcluster_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
)

// These tests run the spec's semantics end to end: real gRPC and Raft on
// loopback, sessions of different clients, one shared 3-node cluster.

func TestSharedLocksCoexist(t *testing.T) {
	c := shared(t)
	a, b, w := dial(t, c), dial(t, c), dial(t, c)
	ctx := ctxT(t)
	name := t.Name()
	ra, err := a.Acquire(ctx, name, lockcluster.Options{Mode: lockcluster.Shared})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.Acquire(ctx, name, lockcluster.Options{Mode: lockcluster.Shared})
	if err != nil {
		t.Fatal(err)
	}
	// A writer waits behind both readers; ifAvailable sees it taken.
	if _, err := w.Acquire(ctx, name, lockcluster.Options{IfAvailable: true}); !errors.Is(err, lockcluster.ErrNotAvailable) {
		t.Fatalf("ifAvailable writer: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		done <- w.Request(ctx, name, lockcluster.Options{}, func(ctx context.Context, l *lockcluster.Lock) error {
			if l.Mode() != lockcluster.Exclusive {
				return errors.New("wrong mode")
			}
			return nil
		})
	}()
	waitPending(t, c, a, name, 1)
	// A shared request behind the queued writer waits too (explainer FAQ).
	if _, err := b.Acquire(ctx, name, lockcluster.Options{Mode: lockcluster.Shared, IfAvailable: true}); !errors.Is(err, lockcluster.ErrNotAvailable) {
		t.Fatalf("shared ifAvailable behind a queued writer: %v", err)
	}
	ra.Release(ctx)
	rb.Release(ctx)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestStealCancelsHolderContext(t *testing.T) {
	c := shared(t)
	a, b := dial(t, c), dial(t, c)
	ctx := ctxT(t)
	name := t.Name()
	held := make(chan struct{})
	result := make(chan error, 1)
	go func() {
		result <- a.Request(ctx, name, lockcluster.Options{}, func(ctx context.Context, l *lockcluster.Lock) error {
			close(held)
			<-ctx.Done()
			return context.Cause(ctx)
		})
	}()
	<-held
	var token uint64
	err := b.Request(ctx, name, lockcluster.Options{Steal: true}, func(ctx context.Context, l *lockcluster.Lock) error {
		token = l.Token()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-result; !errors.Is(err, lockcluster.ErrStolen) {
		t.Fatalf("holder's callback ctx cause: %v, want ErrStolen", err)
	}
	if token == 0 {
		t.Fatal("stealer got no token")
	}
}

func TestAbortByContext(t *testing.T) {
	c := shared(t)
	a, b := dial(t, c), dial(t, c)
	ctx := ctxT(t)
	name := t.Name()
	l, err := a.Acquire(ctx, name, lockcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	ran := false
	err = b.Request(wctx, name, lockcluster.Options{}, func(context.Context, *lockcluster.Lock) error { ran = true; return nil })
	if !errors.Is(err, lockcluster.ErrAborted) || !errors.Is(err, context.DeadlineExceeded) || ran {
		t.Fatalf("timed-out request: %v (ran=%v), want AbortError with DeadlineExceeded", err, ran)
	}
	q, err := a.Query(ctx)
	if err != nil || len(pendingOf(q, name)) != 0 {
		t.Fatalf("aborted request still queued: %+v %v", q, err)
	}
	// An already cancelled context sends nothing.
	dead, cancel2 := context.WithCancel(ctx)
	cancel2()
	if _, err := b.Acquire(dead, name, lockcluster.Options{}); !errors.Is(err, lockcluster.ErrAborted) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
}

func TestIfAvailableCallbackGetsNil(t *testing.T) {
	c := shared(t)
	a, b := dial(t, c), dial(t, c)
	ctx := ctxT(t)
	name := t.Name()
	l, err := a.Acquire(ctx, name, lockcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	called := false
	err = b.Request(ctx, name, lockcluster.Options{IfAvailable: true}, func(ctx context.Context, l *lockcluster.Lock) error {
		called = true
		if l != nil {
			t.Error("got a lock that is held by another session")
		}
		return nil
	})
	if err != nil || !called {
		t.Fatalf("ifAvailable: err=%v called=%v", err, called)
	}
	l.Release(ctx)
}

func TestScopeIsAllOrNothing(t *testing.T) {
	c := shared(t)
	a, b := dial(t, c), dial(t, c)
	ctx := ctxT(t)
	x, y := t.Name()+"/x", t.Name()+"/y"
	lx, err := a.Acquire(ctx, x, lockcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got atomic.Pointer[lockcluster.Lock]
	done := make(chan struct{})
	go func() {
		defer close(done)
		l, err := b.Acquire(ctx, y, lockcluster.Options{Scope: []string{x}})
		if err != nil {
			t.Error(err)
			return
		}
		got.Store(l)
	}()
	waitPending(t, c, a, x, 1)
	// b holds neither name while it waits: y is free for an ifAvailable
	// request? No: b is queued on y too, so y's queue is not empty.
	if _, err := a.Acquire(ctx, y, lockcluster.Options{IfAvailable: true}); !errors.Is(err, lockcluster.ErrNotAvailable) {
		t.Fatalf("y while a scope waits for it: %v", err)
	}
	q, _ := a.Query(ctx)
	if len(heldOf(q, y)) != 0 {
		t.Fatalf("scope partly held: %+v", q.Held)
	}
	lx.Release(ctx)
	<-done
	l := got.Load()
	if l == nil || len(l.Names()) != 2 {
		t.Fatalf("scope lock %+v", l)
	}
	q, _ = a.Query(ctx)
	if len(heldOf(q, x)) != 1 || len(heldOf(q, y)) != 1 {
		t.Fatalf("scope not held on both names: %+v", q.Held)
	}
	l.Release(ctx)
}

func TestErrorsCarryWebLocksNames(t *testing.T) {
	c := shared(t)
	a := dial(t, c)
	ctx := ctxT(t)
	for _, tc := range []struct {
		name string
		opts lockcluster.Options
		want error
	}{
		{"-reserved", lockcluster.Options{}, lockcluster.ErrNotSupported},
		{"x", lockcluster.Options{Steal: true, IfAvailable: true}, lockcluster.ErrNotSupported},
		{"x", lockcluster.Options{Steal: true, Mode: lockcluster.Shared}, lockcluster.ErrNotSupported},
		{"\xff", lockcluster.Options{}, lockcluster.ErrInvalid},
		{"x", lockcluster.Options{Scope: []string{"x"}}, lockcluster.ErrInvalid},
		{string(make([]byte, 2000)), lockcluster.Options{}, lockcluster.ErrLimit},
	} {
		_, err := a.Acquire(ctx, tc.name, tc.opts)
		if !errors.Is(err, tc.want) {
			t.Errorf("Acquire(%.10q, %+v) = %v, want %v", tc.name, tc.opts, err, tc.want)
		}
		var le *lockcluster.Error
		if !errors.As(err, &le) || le.Name == "" || le.Message == "" {
			t.Errorf("error %v carries no Web Locks name or message", err)
		}
	}
}

func TestNamespacesAreIsolated(t *testing.T) {
	c := shared(t)
	a := dial(t, c, lockcluster.WithNamespace("team-a"))
	b := dial(t, c, lockcluster.WithNamespace("team-b"))
	ctx := ctxT(t)
	la, err := a.Acquire(ctx, "db", lockcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Release(ctx)
	lb, err := b.Acquire(ctx, "db", lockcluster.Options{IfAvailable: true})
	if err != nil {
		t.Fatalf("same name in another namespace: %v", err)
	}
	defer lb.Release(ctx)
	q, _ := b.Query(ctx)
	for _, h := range q.Held {
		if h.SessionID == a.SessionID() {
			t.Fatal("query shows another namespace's lock")
		}
	}
}

// The lock is released when the callback panics, and the panic goes on.
func TestCallbackPanicReleasesTheLock(t *testing.T) {
	c := shared(t)
	a, b := dial(t, c), dial(t, c)
	ctx := ctxT(t)
	name := t.Name()
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the callback's panic", r)
			}
		}()
		a.Request(ctx, name, lockcluster.Options{}, func(context.Context, *lockcluster.Lock) error { panic("boom") })
	}()
	if _, err := b.Acquire(ctx, name, lockcluster.Options{IfAvailable: true}); err != nil {
		t.Fatalf("the lock was not released after the panic: %v", err)
	}
}

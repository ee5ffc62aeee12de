package lockcluster_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockcluster/lockcluster"
)

// failing makes the client's unary calls of one method fail with code
// while it is on (the releases and aborts of a client dialled with
// WithUnaryWrites).
type failing struct {
	method string
	code   codes.Code
	on     atomic.Bool
	calls  atomic.Int64 // calls of method while on
}

func (f *failing) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if strings.HasSuffix(method, "/"+f.method) && f.on.Load() {
		f.calls.Add(1)
		return status.Errorf(f.code, "test: the node failed the %s (%s)", f.method, f.code)
	}
	return invoke(ctx, method, req, reply, cc, opts...)
}

// loseReply sends a call and loses its reply: the cluster applies it, and
// the caller hears nothing until its context ends.
func loseReply(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if err := invoke(ctx, method, req, reply, cc, opts...); err != nil {
		return err
	}
	<-ctx.Done()
	return status.FromContextError(ctx.Err()).Err()
}

// heldBy counts the locks on name that a query of observer shows.
func heldBy(observer *lockcluster.Client, name string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	q, err := observer.Query(ctx)
	if err != nil {
		return -1
	}
	return len(heldOf(q, name))
}

// A Release the cluster does not confirm (an error of the node's own, or no
// endpoint answering before the caller's deadline) returns the error, and
// the lock ends for its holder; the client goes on sending the release, so
// the lock does not stay held by the session, which lives on. Before, the
// first failure was final: the lock stayed held as long as the client
// heartbeated, and every request queued behind it waited forever
// (docs/chaos.md, finding 6).
func TestUnconfirmedReleaseGoesOn(t *testing.T) {
	c := shared(t)
	for _, tc := range []struct {
		name string
		code codes.Code
		want error
	}{
		// Not retried by the call itself: before, given up at once.
		{"node timed out", codes.DeadlineExceeded, nil},
		{"internal error", codes.Internal, nil},
		// Retried on every endpoint until the caller's deadline.
		{"unavailable past the deadline", codes.Unavailable, lockcluster.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &failing{method: "Release", code: tc.code}
			cl := dial(t, c, lockcluster.WithDialOptions(grpc.WithUnaryInterceptor(f.intercept)), lockcluster.WithUnaryWrites())
			observer := dial(t, c)
			name := "unconfirmed-" + strings.ReplaceAll(tc.name, " ", "-")
			l, err := cl.Acquire(ctxT(t), name, lockcluster.Options{})
			if err != nil {
				t.Fatal(err)
			}
			session := cl.SessionID()
			f.on.Store(true)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			err = l.Release(ctx)
			cancel()
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) || !strings.Contains(err.Error(), "goes on sending it") {
				t.Fatalf("Release failing with %s: %v; want an error matching %v that says the release goes on", tc.code, err, tc.want)
			}
			if !errors.Is(l.Err(), lockcluster.ErrReleased) {
				t.Fatalf("the lock's cause after an unconfirmed Release: %v, want ErrReleased", l.Err())
			}
			if again := l.Release(ctxT(t)); again == nil || again.Error() != err.Error() {
				t.Fatalf("a second Release: %v, want the first one's answer %v", again, err)
			}
			// Still held, and the release is being sent again.
			c.WaitFor(10*time.Second, "the release to be sent again", func() bool { return f.calls.Load() >= 3 })
			if n := heldBy(observer, name); n != 1 {
				t.Fatalf("held locks on %s while every release fails: %d, want 1", name, n)
			}
			f.on.Store(false)
			c.WaitFor(15*time.Second, "the unconfirmed release to go through", func() bool { return heldBy(observer, name) == 0 })
			if cl.SessionID() != session {
				t.Fatalf("the session changed from %d to %d: the lock was freed by losing it, not by the release", session, cl.SessionID())
			}
			if _, err := observer.Acquire(ctxT(t), name, lockcluster.Options{IfAvailable: true}); err != nil {
				t.Fatalf("another client's ifAvailable acquire after the release went through: %v", err)
			}
		})
	}
}

// Request releases the lock itself when its callback returns: when that
// release is not confirmed, Request says so, and the release goes on.
func TestRequestUnconfirmedReleaseGoesOn(t *testing.T) {
	c := shared(t)
	f := &failing{method: "Release", code: codes.DeadlineExceeded}
	cl := dial(t, c, lockcluster.WithDialOptions(grpc.WithUnaryInterceptor(f.intercept)), lockcluster.WithUnaryWrites())
	observer := dial(t, c)
	err := cl.Request(ctxT(t), "request-unconfirmed", lockcluster.Options{}, func(ctx context.Context, l *lockcluster.Lock) error {
		f.on.Store(true)
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), `releasing lock "request-unconfirmed"`) {
		t.Fatalf("Request whose release fails: %v, want an error about the release", err)
	}
	c.WaitFor(10*time.Second, "the release to be sent again", func() bool { return f.calls.Load() >= 3 })
	f.on.Store(false)
	c.WaitFor(15*time.Second, "the release to go through", func() bool { return heldBy(observer, "request-unconfirmed") == 0 })
}

// An abort the node fails with an error of its own (not Unavailable, which
// the call retries by itself) is delivered later all the same: the grant
// that won the race is released.
func TestAbandonedGrantReleasedAfterNodeErrors(t *testing.T) {
	c := shared(t)
	f := &failing{method: "Abort", code: codes.DeadlineExceeded}
	lostReply := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if strings.HasSuffix(method, "/Request") {
			return loseReply(ctx, method, req, reply, cc, invoke, opts...)
		}
		return f.intercept(ctx, method, req, reply, cc, invoke, opts...)
	}
	cl := dial(t, c, lockcluster.WithDialOptions(grpc.WithUnaryInterceptor(lostReply)), lockcluster.WithUnaryWrites())
	observer := dial(t, c)
	f.on.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // ample for the Request to be applied
	defer cancel()
	if l, err := cl.Acquire(ctx, "abandoned-node-error", lockcluster.Options{}); !errors.Is(err, lockcluster.ErrAborted) {
		t.Fatalf("Acquire with its reply lost: %v, %v; want ErrAborted", l, err)
	}
	c.WaitFor(10*time.Second, "the abort to be sent again", func() bool { return f.calls.Load() >= 3 })
	if n := heldBy(observer, "abandoned-node-error"); n != 1 {
		t.Fatalf("held locks while every abort fails: %d, want the abandoned grant", n)
	}
	f.on.Store(false)
	c.WaitFor(15*time.Second, "the abandoned grant to be released", func() bool { return heldBy(observer, "abandoned-node-error") == 0 })
}

// A Request the node answers with an error that says nothing of it (here:
// applied and granted, then an internal error instead of the reply) fails
// for the caller, and the grant nobody waits for is released: the client
// aborts the request in the background. Before, it forgot the request,
// and the lock stayed held as long as the session lived.
func TestFailedRequestGrantIsReleased(t *testing.T) {
	c := shared(t)
	var fail atomic.Bool
	fail.Store(true)
	internal := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if strings.HasSuffix(method, "/Request") && fail.Load() {
			if err := invoke(ctx, method, req, reply, cc, opts...); err != nil {
				return err
			}
			return status.Error(codes.Internal, "test: the node failed after applying the request")
		}
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	cl := dial(t, c, lockcluster.WithDialOptions(grpc.WithUnaryInterceptor(internal)), lockcluster.WithUnaryWrites())
	observer := dial(t, c)
	if l, err := cl.Acquire(ctxT(t), "failed-request", lockcluster.Options{}); err == nil || errors.Is(err, lockcluster.ErrAborted) {
		t.Fatalf("Acquire answered with an internal error: %v, %v; want that error", l, err)
	}
	c.WaitFor(15*time.Second, "the grant nobody waits for to be released", func() bool { return heldBy(observer, "failed-request") == 0 })
	fail.Store(false)
	if _, err := cl.Acquire(ctxT(t), "failed-request", lockcluster.Options{IfAvailable: true}); err != nil {
		t.Fatalf("the same client's ifAvailable acquire afterwards: %v", err)
	}
}

// A lock stolen while its holder's stream delivers nothing (the theft's
// event has not reached the client): the holder's release finds it
// stolen, and Request returns ErrStolen, as it does when the holder heard
// in time. Before, the release's STOLEN answer was ignored and Request
// returned nil: the holder believed it had held the lock to the end.
func TestReleaseFindsLockStolen(t *testing.T) {
	c := shared(t)
	tp := &streamTap{}
	holder := dial(t, c, lockcluster.WithTTL(time.Minute), lockcluster.WithUnaryWrites(),
		lockcluster.WithDialOptions(grpc.WithStreamInterceptor(tp.intercept)))
	thief := dial(t, c)
	var held *lockcluster.Lock
	err := holder.Request(ctxT(t), "stolen-unheard", lockcluster.Options{}, func(ctx context.Context, l *lockcluster.Lock) error {
		held = l
		tp.frozen.Store(true) // the theft's event never arrives
		if _, err := thief.Acquire(ctxT(t), "stolen-unheard", lockcluster.Options{Steal: true}); err != nil {
			t.Errorf("steal: %v", err)
		}
		if ctx.Err() != nil {
			t.Errorf("the holder heard of the theft despite the frozen stream: %v", context.Cause(ctx))
		}
		return nil
	})
	if !errors.Is(err, lockcluster.ErrStolen) || !errors.Is(err, lockcluster.ErrAborted) {
		t.Fatalf("Request whose lock was stolen unheard: %v, want an error matching ErrStolen and ErrAborted", err)
	}
	if !errors.Is(held.Err(), lockcluster.ErrStolen) {
		t.Fatalf("the lock's cause: %v, want ErrStolen", held.Err())
	}
}

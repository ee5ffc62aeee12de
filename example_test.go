package lockcluster_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/lockcluster/lockcluster"
)

// endpoints of a running cluster; here, an in-process test cluster.
func endpoints() []string { return shared(nil).Addrs() }

// Run a function while holding a lock, like navigator.locks.request.
func Example() {
	ctx := context.Background()
	c, err := lockcluster.Dial(ctx, endpoints(), lockcluster.WithNamespace("example"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)

	err = c.Request(ctx, "invoices", lockcluster.Options{}, func(ctx context.Context, l *lockcluster.Lock) error {
		// The lock is held until this function returns. ctx is cancelled
		// if the lock is lost (stolen, or the session lost).
		fmt.Println("holding", l.Name(), l.Mode())
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: holding invoices exclusive
}

// Pass the fencing token to the resource the lock protects: tokens only
// grow, so the resource can refuse a write from a holder that lost the lock.
func ExampleClient_Acquire() {
	ctx := context.Background()
	c, err := lockcluster.Dial(ctx, endpoints(), lockcluster.WithNamespace("example"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)

	first, err := c.Acquire(ctx, "ledger", lockcluster.Options{})
	if err != nil {
		log.Fatal(err)
	}
	firstToken := first.Token()
	first.Release(ctx)

	second, err := c.Acquire(ctx, "ledger", lockcluster.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer second.Release(ctx)
	fmt.Println("newer holder has a larger token:", second.Token() > firstToken)
	// Output: newer holder has a larger token: true
}

// IfAvailable: take the lock only if nobody holds it; otherwise the
// callback runs with a nil lock.
func ExampleOptions_ifAvailable() {
	ctx := context.Background()
	a, _ := lockcluster.Dial(ctx, endpoints(), lockcluster.WithNamespace("example"))
	defer a.Close(ctx)
	b, _ := lockcluster.Dial(ctx, endpoints(), lockcluster.WithNamespace("example"))
	defer b.Close(ctx)

	held, _ := a.Acquire(ctx, "report", lockcluster.Options{})
	defer held.Release(ctx)
	b.Request(ctx, "report", lockcluster.Options{IfAvailable: true}, func(ctx context.Context, l *lockcluster.Lock) error {
		fmt.Println("got it:", l != nil)
		return nil
	})
	// Output: got it: false
}

// Abort a request that waits too long: cancelling its context (here, a
// timeout) before the grant makes Request fail with ErrAborted.
func ExampleClient_Request_timeout() {
	ctx := context.Background()
	a, _ := lockcluster.Dial(ctx, endpoints(), lockcluster.WithNamespace("example"))
	defer a.Close(ctx)
	b, _ := lockcluster.Dial(ctx, endpoints(), lockcluster.WithNamespace("example"))
	defer b.Close(ctx)

	held, _ := a.Acquire(ctx, "busy", lockcluster.Options{})
	defer held.Release(ctx)
	wait, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err := b.Request(wait, "busy", lockcluster.Options{}, func(context.Context, *lockcluster.Lock) error { return nil })
	fmt.Println(errors.Is(err, lockcluster.ErrAborted), errors.Is(err, context.DeadlineExceeded))
	// Output: true true
}

// Abort a queued request: cancelling its context (here with a cause, as
// soon as OnQueued says the request waits) removes it from the queue.
// Request fails with ErrAborted and the cause, and the callback never runs.
func ExampleClient_Request_abort() {
	ctx := context.Background()
	a, _ := lockcluster.Dial(ctx, endpoints(), lockcluster.WithNamespace("example"))
	defer a.Close(ctx)
	b, _ := lockcluster.Dial(ctx, endpoints(), lockcluster.WithNamespace("example"))
	defer b.Close(ctx)

	held, _ := a.Acquire(ctx, "queue", lockcluster.Options{})
	defer held.Release(ctx)
	errGaveUp := errors.New("gave up")
	wait, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	opts := lockcluster.Options{OnQueued: func() {
		fmt.Println("queued behind the holder")
		cancel(errGaveUp)
	}}
	err := b.Request(wait, "queue", opts, func(context.Context, *lockcluster.Lock) error {
		fmt.Println("never runs")
		return nil
	})
	fmt.Println(errors.Is(err, lockcluster.ErrAborted), errors.Is(err, errGaveUp))
	// Output:
	// queued behind the holder
	// true true
}

// Steal a lock: the stealer is granted it at once, ahead of any queue. The
// old holder's context is cancelled with ErrStolen, and its Request fails
// with an AbortError (errors.Is(err, ErrAborted)) even though its callback
// returned nil: its work under the lock may be incomplete.
func ExampleOptions_steal() {
	ctx := context.Background()
	a, _ := lockcluster.Dial(ctx, endpoints(), lockcluster.WithNamespace("example"))
	defer a.Close(ctx)
	b, _ := lockcluster.Dial(ctx, endpoints(), lockcluster.WithNamespace("example"))
	defer b.Close(ctx)

	holding := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- a.Request(ctx, "printer", lockcluster.Options{}, func(ctx context.Context, l *lockcluster.Lock) error {
			close(holding)
			<-ctx.Done() // the lock is gone: stop using the printer
			return nil
		})
	}()
	<-holding
	b.Request(ctx, "printer", lockcluster.Options{Steal: true}, func(ctx context.Context, l *lockcluster.Lock) error {
		fmt.Println("the stealer holds", l.Name())
		return nil
	})
	err := <-done
	fmt.Println("old holder stolen:", errors.Is(err, lockcluster.ErrStolen), "aborted:", errors.Is(err, lockcluster.ErrAborted))
	// Output:
	// the stealer holds printer
	// old holder stolen: true aborted: true
}

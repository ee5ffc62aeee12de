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

// Records: a lock carries data that only its exclusive holder writes,
// fenced by its token. The next holder's grant carries what the last one
// left: here, how far a batch job got.
func ExampleLock_ReleaseWithRecord() {
	ctx := context.Background()
	c, err := lockcluster.Dial(ctx, endpoints(), lockcluster.WithNamespace("example-records"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)

	first, err := c.Acquire(ctx, "batch", lockcluster.Options{})
	if err != nil {
		log.Fatal(err)
	}
	// Release, and leave a note for the next holder, in one entry.
	if _, err := first.ReleaseWithRecord(ctx, "batch", []byte("done up to row 500")); err != nil {
		log.Fatal(err)
	}

	next, err := c.Acquire(ctx, "batch", lockcluster.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer next.Release(ctx)
	rec, _ := next.Record("batch")
	fmt.Printf("%s (written by the first holder: %v)\n", rec.Value, rec.Token == first.Token())

	// Anyone can read it, linearizably.
	rec, found, err := c.Record(ctx, "batch")
	fmt.Println(found, string(rec.Value), err)
	// Output:
	// done up to row 500 (written by the first holder: true)
	// true done up to row 500 <nil>
}

// Watch a namespace's changes: first a snapshot, then every change in log
// order, each with its log index. The watch moves to another node when
// its node fails and resumes where it was: no gap, no duplicate.
func ExampleClient_Watch() {
	ctx := context.Background()
	c, err := lockcluster.Dial(ctx, endpoints(), lockcluster.WithNamespace("example-watch"), lockcluster.WithLabel("worker-1"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)

	w, err := c.Watch(ctx, lockcluster.WatchOptions{Prefix: "jobs/"})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	ev, err := w.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("snapshot: held", len(ev.Snapshot.Held))

	l, err := c.Acquire(ctx, "jobs/nightly", lockcluster.Options{})
	if err != nil {
		log.Fatal(err)
	}
	l.ReleaseWithRecord(ctx, "jobs/nightly", []byte("ok"))

	for seen := 0; seen < 3; {
		ev, err := w.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		for _, ch := range ev.Changes {
			fmt.Println(ch.Kind, ch.Names, ch.Label)
			seen++
		}
	}
	// Output:
	// snapshot: held 0
	// granted [jobs/nightly] worker-1
	// record-set [jobs/nightly] worker-1
	// released [jobs/nightly] worker-1
}

// A semaphore: a shared lock that at most MaxHolders holders hold at once;
// the others queue, first come first served.
func ExampleOptions_maxHolders() {
	ctx := context.Background()
	c, err := lockcluster.Dial(ctx, endpoints(), lockcluster.WithNamespace("example-semaphore"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)

	slots := lockcluster.Options{Mode: lockcluster.Shared, MaxHolders: 2}
	a, _ := c.Acquire(ctx, "encoders", slots)
	defer a.Release(ctx)
	b, _ := c.Acquire(ctx, "encoders", slots)
	defer b.Release(ctx)

	third := slots
	third.IfAvailable = true
	_, err = c.Acquire(ctx, "encoders", third)
	fmt.Println("a third encoder:", errors.Is(err, lockcluster.ErrNotAvailable))

	q, _ := c.Query(ctx)
	fmt.Println("held:", len(q.Held), "max:", q.Held[0].MaxHolders)
	// Output:
	// a third encoder: true
	// held: 2 max: 2
}

package lockcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
)

// A waiter whose session stream is attached to the leader gets its grant
// after the leader goes away: the stream reattaches to another node,
// resynchronises, and the grant arrives once.
func TestGrantArrivesAfterTheStreamsNodeStops(t *testing.T) {
	c := nodetest.Start(t, 3, nodetest.Options{Quiet: true})
	leader := c.WaitLeader(10 * time.Second)
	addrs := c.Addrs()
	// The waiter talks to the leader first; the holder to another node.
	waiterAddrs := append([]string{addrs[leader]}, addrs...)
	holderAddrs := []string{addrs[(leader+1)%3], addrs[(leader+2)%3]}
	holder, waiter := dialAddrs(t, holderAddrs), dialAddrs(t, waiterAddrs)
	ctx := ctxT(t)

	held, err := holder.Acquire(ctx, "r", lockcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lockcluster.Lock, 2)
	go func() {
		l, err := waiter.Acquire(ctx, "r", lockcluster.Options{})
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitPending(t, c, holder, "r", 1)
	c.Stop(leader) // the waiter's stream and the leadership go away
	c.WaitLeader(10 * time.Second)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l == nil || l.Token() <= held.Token() {
			t.Fatalf("waiter's lock %+v", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the grant never reached the waiter after its stream's node stopped")
	}
}

func dialAddrs(t *testing.T, addrs []string, opts ...lockcluster.Option) *lockcluster.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := lockcluster.Dial(ctx, addrs, opts...)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cl.Close(ctx)
	})
	return cl
}

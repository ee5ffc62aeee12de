package lockcluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
)

func dial(t *testing.T, c *nodetest.Cluster, opts ...lockcluster.Option) *lockcluster.Client {
	t.Helper()
	return dialAddrs(t, c.Addrs(), opts...)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestGrantQueueRelease(t *testing.T) {
	c := nodetest.Start(t, 3, nodetest.Options{})
	a, b := dial(t, c), dial(t, c)
	ctx := ctxT(t)

	la, err := a.Acquire(ctx, "x", lockcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lockcluster.Lock, 1)
	go func() {
		lb, err := b.Acquire(ctx, "x", lockcluster.Options{})
		if err != nil {
			t.Error(err)
		}
		got <- lb
	}()
	c.WaitFor(5*time.Second, "b queued", func() bool {
		q, err := a.Query(ctx)
		return err == nil && len(q.Pending) == 1 && q.Pending[0].SessionID == b.SessionID()
	})
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb := <-got
	if lb == nil || lb.Token() <= la.Token() {
		t.Fatalf("b's lock %+v after a's token %d", lb, la.Token())
	}
	if !errors.Is(la.Err(), lockcluster.ErrReleased) {
		t.Fatalf("released lock's cause: %v", la.Err())
	}
	q, err := b.Query(ctx)
	if err != nil || len(q.Held) != 1 || q.Held[0].Token != lb.Token() || len(q.Pending) != 0 {
		t.Fatalf("query %+v %v", q, err)
	}
}

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

// An Acquire whose reply is lost and whose caller gives up: the cluster
// granted the lock at once, and no stream event repeats a grant that a
// reply carries. The client's abort fails for its whole attempt; it keeps
// delivering it in the background, and the lock is released without the
// caller doing anything more.
func TestAbandonedImmediateGrantIsReleased(t *testing.T) {
	c := shared(t)
	var abortsLost atomic.Bool
	abortsLost.Store(true)
	lossy := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		switch {
		case strings.HasSuffix(method, "/Request"):
			return loseReply(ctx, method, req, reply, cc, invoke, opts...)
		case strings.HasSuffix(method, "/Abort") && abortsLost.Load():
			return status.Error(codes.Unavailable, "test: the abort is lost")
		}
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	cl := dial(t, c, lockcluster.WithDialOptions(grpc.WithUnaryInterceptor(lossy)), lockcluster.WithUnaryWrites())
	observer := dial(t, c)
	held := func() int { return heldBy(observer, "abandoned") }

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // ample for the Request to be applied
	defer cancel()
	if l, err := cl.Acquire(ctx, "abandoned", lockcluster.Options{}); !errors.Is(err, lockcluster.ErrAborted) {
		t.Fatalf("Acquire with its reply lost: %v, %v; want ErrAborted", l, err)
	}
	if n := held(); n != 1 {
		t.Fatalf("held locks on the name after the lost reply: %d, want the abandoned grant", n)
	}
	abortsLost.Store(false)
	c.WaitFor(15*time.Second, "the abandoned grant to be released", func() bool { return held() == 0 })
}

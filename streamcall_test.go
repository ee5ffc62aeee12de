package lockcluster_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/lockcluster/lockcluster"
)

// Once the session stream is attached, a lock and its release travel on
// it: no unary Request or Release leaves the client. With WithUnaryWrites
// every one is a unary call.
func TestWritesTravelOnTheSessionStream(t *testing.T) {
	c := shared(t)
	for _, unary := range []bool{false, true} {
		var calls atomic.Int64
		count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if strings.HasSuffix(method, "/Request") || strings.HasSuffix(method, "/Release") {
				calls.Add(1)
			}
			return invoke(ctx, method, req, reply, cc, opts...)
		}
		opts := []lockcluster.Option{lockcluster.WithDialOptions(grpc.WithUnaryInterceptor(count))}
		if unary {
			opts = append(opts, lockcluster.WithUnaryWrites())
		}
		cl := dial(t, c, opts...)
		c.WaitFor(10*time.Second, "the session stream to take calls", cl.OnStream)
		for range 10 {
			l, err := cl.Acquire(ctxT(t), t.Name(), lockcluster.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		}
		want := int64(0)
		if unary {
			want = 20
		}
		if got := calls.Load(); got != want {
			t.Fatalf("unary writes %v: %d unary Request/Release calls for 10 pairs, want %d", unary, got, want)
		}
	}
}

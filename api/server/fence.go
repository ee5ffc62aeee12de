package server

import (
	"context"
	"strings"

	"google.golang.org/grpc"
)

// A replica whose applied history diverged from the leader's (raftnode's
// checkpoints) must not answer anything from its state: these interceptors
// fail every lockcluster.v1 call with Unavailable, reason REPLICA_DIVERGED,
// naming the mismatch, while diverged returns an error. Clients move to
// another node. Health and reflection stay open (health says NOT_SERVING).

func fenced(method string, diverged func() error) error {
	if !strings.HasPrefix(method, "/lockcluster.v1.") {
		return nil
	}
	if err := diverged(); err != nil {
		return toStatus(err)
	}
	return nil
}

// FenceUnary refuses unary calls while diverged returns an error.
func FenceUnary(diverged func() error) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := fenced(info.FullMethod, diverged); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// FenceStream refuses streams while diverged returns an error, and ends
// the streams already open when fence is done (context.AfterFunc: no
// goroutine per stream).
func FenceStream(diverged func() error, fence context.Context) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := fenced(info.FullMethod, diverged); err != nil {
			return err
		}
		if !strings.HasPrefix(info.FullMethod, "/lockcluster.v1.") {
			return handler(srv, ss)
		}
		ctx, end := context.WithCancel(ss.Context())
		defer end()
		stop := context.AfterFunc(fence, end)
		defer stop()
		err := handler(srv, fencedStream{ss, ctx})
		if fe := fenced(info.FullMethod, diverged); fe != nil {
			return fe
		}
		return err
	}
}

type fencedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s fencedStream) Context() context.Context { return s.ctx }

package server

import (
	"context"
	"strings"

	"google.golang.org/grpc"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// A replica that is unfit to serve (raftnode's fences: its applied history
// diverged from the leader's, its stores are damaged, its disk takes no
// writes, or it does not apply what the leader commits) must not answer
// anything from its state: these interceptors fail every lockcluster.v1
// call with Unavailable (reason REPLICA_DIVERGED for a divergence,
// NOT_READY otherwise), naming the cause, while unfit returns an error.
// Clients move to another node. Health and reflection stay open (health
// says NOT_SERVING), and so does Cluster/Status: it tells only the node's
// own facts (no lock state), among them why it is unfit (its unfit field),
// so that the leader's probes and `lockcluster status` show a fenced node
// as reachable and fenced, with the reason, not as unreachable.

func fenced(method string, diverged func() error) error {
	if !strings.HasPrefix(method, "/lockcluster.v1.") || method == pb.Cluster_Status_FullMethodName {
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
// the streams already open when the context fence returns is done
// (context.AfterFunc: no goroutine per stream). fence is called before
// diverged, so that a fence raised in between is not missed.
func FenceStream(diverged func() error, fence func() context.Context) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !strings.HasPrefix(info.FullMethod, "/lockcluster.v1.") {
			return handler(srv, ss)
		}
		episode := fence()
		if err := fenced(info.FullMethod, diverged); err != nil {
			return err
		}
		ctx, end := context.WithCancel(ss.Context())
		defer end()
		stop := context.AfterFunc(episode, end)
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

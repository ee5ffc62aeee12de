package node_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/node"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
)

// A client that attaches its session stream and never reads it, while its
// session is granted one 64-name scope (64 KiB of names) after another, is
// cut off with the resynchronise error once the node holds more than the
// stream's byte cap for it; it gets only the events sent before the cut.
// (The hub test, TestHubCutsStreamOverByteCap, checks the backlog itself.)
func TestStalledStreamIsCutByBytes(t *testing.T) {
	const limit = 256 << 10
	c := nodetest.Start(t, 1, nodetest.Options{Quiet: true, Node: func(cfg *node.Config) {
		cfg.Server.StreamBacklogBytes = limit
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Small fixed windows: what gRPC itself buffers for the stream stays a
	// couple of events, so the backlog must pass the cap.
	cc := rawConn(t, c.Addrs()[0], grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	lc := pb.NewLocksClient(cc)
	open := func() *pb.OpenSessionResponse {
		s, err := lc.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: "big", Ttl: durationpb.New(10 * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	holder, stalled := open(), open()
	st, err := lc.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Attach{Attach: &pb.Attach{Namespace: "big", SessionId: stalled.SessionId, SessionSecret: stalled.Secret}}}); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 64)
	for i := range names {
		names[i] = fmt.Sprintf("%04d", i) + strings.Repeat("x", 996)
	}
	// Each round: the holder takes the scope, the stalled session queues for
	// it, the holder releases (an event of 64 names for the stalled
	// session's stream), the stalled session releases.
	const rounds = 30
	for i := uint64(1); i <= rounds; i++ {
		r, err := lc.Request(ctx, &pb.LockRequest{Namespace: "big", SessionId: holder.SessionId, SessionSecret: holder.Secret, RequestId: i, Names: names})
		if err != nil || r.Status != pb.Status_STATUS_GRANTED {
			t.Fatalf("round %d: holder: %v, %v", i, r, err)
		}
		r, err = lc.Request(ctx, &pb.LockRequest{Namespace: "big", SessionId: stalled.SessionId, SessionSecret: stalled.Secret, RequestId: i, Names: names})
		if err != nil || r.Status != pb.Status_STATUS_QUEUED {
			t.Fatalf("round %d: stalled session: %v, %v", i, r, err)
		}
		if _, err := lc.Release(ctx, &pb.ReleaseRequest{Namespace: "big", SessionId: holder.SessionId, SessionSecret: holder.Secret, RequestId: i}); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if _, err := lc.Release(ctx, &pb.ReleaseRequest{Namespace: "big", SessionId: stalled.SessionId, SessionSecret: stalled.Secret, RequestId: i}); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
	// Now read: the Synced, the events sent before the cut, then the error.
	events := 0
	for {
		m, err := st.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "resynchronise") {
				t.Fatalf("stream ended with %v after %d events: want ResourceExhausted, reconnect to resynchronise", err, events)
			}
			break
		}
		if m.GetEvent() != nil {
			if events++; events == rounds {
				t.Fatalf("the stalled stream got all %d events: it was not cut", events)
			}
		}
	}
	t.Logf("the stalled stream got %d of %d events before the cut", events, rounds)
}

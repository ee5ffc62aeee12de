package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
)

// A node that knows no leader cannot renew a session: once it has known
// none for longer than an election takes (2 s), it says so on the session
// stream at the next heartbeat (Unavailable, naming the cause),
// so that the client moves to another node, instead of dropping the
// heartbeat and keeping the stream open until the client's jeopardy
// (issue 10 item 7, docs/chaos.md finding 2). Checked on the code before
// the fix: the stream stayed silent until the test's deadline.
func TestStreamSaysAtOnceWhenNoLeaderKnown(t *testing.T) {
	c := nodetest.Start(t, 3, nodetest.Options{Quiet: true})
	leader := c.WaitLeader(10 * time.Second)
	alone := (leader + 1) % 3
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc := rawConn(t, c.Addrs()[alone])
	lc := pb.NewLocksClient(cc)
	s, err := lc.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: "noleader", Ttl: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	c.WaitFor(10*time.Second, "the node to apply the session", func() bool { return c.Nodes[alone].Raft().AppliedIndex() >= s.Index })
	for i := range 3 {
		if i != alone {
			c.Stop(i)
		}
	}
	c.WaitFor(20*time.Second, "the remaining node to know no leader", func() bool {
		id, _ := c.Nodes[alone].Raft().Leader()
		return id == ""
	})

	sctx, scancel := context.WithTimeout(ctx, 15*time.Second) // the bound of a failure, not the expected wait
	defer scancel()
	st, err := lc.Session(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Attach{Attach: &pb.Attach{Namespace: "noleader", SessionId: s.SessionId, MinIndex: s.Index, SessionSecret: s.Secret}}}); err != nil {
		t.Fatal(err)
	}
	if m, err := st.Recv(); err != nil || m.GetSynced() == nil {
		t.Fatalf("first message %v, %v: want a Synced", m, err)
	}
	// Heartbeats, resent as a client resends unacknowledged ones: the node
	// ends the stream once it has known no leader for noLeaderGrace.
	go func() {
		for id := uint64(1); sctx.Err() == nil; id++ {
			if st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Heartbeat{Heartbeat: &pb.Heartbeat{Id: id}}}) != nil {
				return
			}
			select {
			case <-sctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	m, err := st.Recv()
	if err == nil {
		t.Fatalf("got %v from a node without a leader, want the stream to end", m)
	}
	if s, _ := status.FromError(err); s.Code() != codes.Unavailable || !strings.Contains(s.Message(), "knows no leader") {
		t.Fatalf("stream ended with %v, want Unavailable saying the node knows no leader", err)
	}
}

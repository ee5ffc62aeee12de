package node_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
)

// The session stream carries what the client cannot know from its own
// calls' replies: grants of queued requests. An outcome a Request's reply
// carries (granted at once, not available) is not sent again as an event;
// its seq is skipped. Every node's stream behaves the same.
func TestStreamLeavesOutRepliedOutcomes(t *testing.T) {
	c := nodetest.Start(t, 3, nodetest.Options{Quiet: true})
	c.WaitLeader(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, addr := range c.Addrs() {
		cc := rawConn(t, addr)
		lc := pb.NewLocksClient(cc)
		s, err := lc.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: "stream", Ttl: durationpb.New(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		st, err := lc.Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Attach{Attach: &pb.Attach{Namespace: "stream", SessionId: s.SessionId, MinIndex: s.Index, SessionSecret: s.Secret}}}); err != nil {
			t.Fatal(err)
		}
		if m, err := st.Recv(); err != nil || m.GetSynced() == nil {
			t.Fatalf("node %d: first message %v, %v: want a Synced", i, m, err)
		}
		name := []string{"n" + string(rune('0'+i))}
		call := func(want pb.Status, req *pb.LockRequest) {
			t.Helper()
			req.Namespace, req.SessionId, req.SessionSecret, req.Names = "stream", s.SessionId, s.Secret, name
			r, err := lc.Request(ctx, req)
			if err != nil || r.Status != want {
				t.Fatalf("node %d: request %d: %v, %v: want %v", i, req.RequestId, r, err, want)
			}
		}
		release := func(id uint64) {
			t.Helper()
			if _, err := lc.Release(ctx, &pb.ReleaseRequest{Namespace: "stream", SessionId: s.SessionId, SessionSecret: s.Secret, RequestId: id}); err != nil {
				t.Fatalf("node %d: release %d: %v", i, id, err)
			}
		}
		next := func(wantReq, wantSeq uint64) {
			t.Helper()
			m, err := st.Recv()
			if err != nil {
				t.Fatalf("node %d: %v", i, err)
			}
			ev := m.GetEvent()
			if ev == nil || ev.Kind != pb.Event_GRANTED || ev.RequestId != wantReq || ev.Seq != wantSeq {
				t.Fatalf("node %d: got %v, want the grant of request %d as event %d", i, m, wantReq, wantSeq)
			}
		}
		call(pb.Status_STATUS_GRANTED, &pb.LockRequest{RequestId: 1})                          // seq 1, replied
		call(pb.Status_STATUS_QUEUED, &pb.LockRequest{RequestId: 2, Signal: true})             // waits behind 1
		release(1)                                                                             // grants 2: seq 2
		next(2, 2)                                                                             // the first event on the stream
		call(pb.Status_STATUS_NOT_AVAILABLE, &pb.LockRequest{RequestId: 3, IfAvailable: true}) // seq 3, replied
		call(pb.Status_STATUS_QUEUED, &pb.LockRequest{RequestId: 4, Signal: true})
		release(2) // grants 4: seq 4
		next(4, 4)
	}
}

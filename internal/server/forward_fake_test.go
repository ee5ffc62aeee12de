package server

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/raftnode"
)

// Forwarding decisions, on servers over the in-memory replica (fake_test.go).

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// open opens a session through node n with a long TTL.
func (n *fakeNode) open(t *testing.T, ns string) *pb.OpenSessionResponse {
	t.Helper()
	s, err := n.locks.OpenSession(testCtx(t), &pb.OpenSessionRequest{Namespace: ns, Label: "test", Ttl: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatalf("open session via %s: %v", n.id, err)
	}
	return s
}

func (n *fakeNode) request(ctx context.Context, s *pb.OpenSessionResponse, ns string, id uint64, name string) (*pb.LockResponse, error) {
	return n.locks.Request(ctx, &pb.LockRequest{Namespace: ns, SessionId: s.SessionId, SessionSecret: s.Secret, RequestId: id,
		Names: []string{name}, Mode: pb.Mode_MODE_EXCLUSIVE})
}

func reasonOf(err error) pb.ErrorReason {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return pb.ErrorReason(pb.ErrorReason_value[info.Reason])
		}
	}
	return 0
}

// A follower forwards a write once to the leader the member directory
// names: the log gets exactly one entry and the follower's caller the
// leader's answer; the follower's own state follows the log.
func TestFollowerForwardsWritesToTheLeader(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	ctx := testCtx(t)
	before := fc.entries()
	s := fc.node("n2").open(t, "fw")
	if got := fc.entries(); got != before+1 {
		t.Fatalf("open via a follower: %d entries appended, want 1", got-before)
	}
	r, err := fc.node("n3").request(ctx, s, "fw", 1, "a")
	if err != nil || r.Status != pb.Status_STATUS_GRANTED || r.Index != uint64(before+2) {
		t.Fatalf("request via another follower: %v, %v: want granted at index %d", r, err, before+2)
	}
	if cmds := fc.commands(before + 1); len(cmds) != 2 {
		t.Fatalf("log after two forwarded writes: %v", cmds)
	} else if _, ok := cmds[1].(*fsm.Request); !ok {
		t.Fatalf("second entry is %T, want the request", cmds[1])
	}
	for _, n := range fc.nodes {
		if q := n.m.Query("fw"); len(q.Held) != 1 {
			t.Errorf("%s holds %v, want the one grant", n.id, q.Held)
		}
	}
}

// A call that was already forwarded is never forwarded again (no loops
// between nodes that disagree about the leader): it fails NOT_LEADER,
// naming the leader, and the log is untouched.
func TestForwardedCallIsNotForwardedAgain(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	s := fc.node("n1").open(t, "fw")
	before := fc.entries()
	ctx := metadata.AppendToOutgoingContext(testCtx(t), forwardedKey, "n3")
	_, err := fc.node("n2").request(ctx, s, "fw", 1, "a")
	if status.Code(err) != codes.Unavailable || reasonOf(err) != pb.ErrorReason_NOT_LEADER {
		t.Fatalf("forwarded call on a follower: %v: want Unavailable NOT_LEADER", err)
	}
	if fc.entries() != before {
		t.Fatal("a refused forwarded call reached the log")
	}
}

// With no leader known, a follower answers NOT_LEADER at once (the client
// retries); nothing reaches the log. Once a leader is elected the same
// call, retried, succeeds through the new leader.
func TestNoLeaderThenNewLeader(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	s := fc.node("n1").open(t, "fw")
	fc.elect("")
	before := fc.entries()
	ctx := testCtx(t)
	for _, n := range fc.nodes {
		if _, err := n.request(ctx, s, "fw", 1, "a"); status.Code(err) != codes.Unavailable || reasonOf(err) != pb.ErrorReason_NOT_LEADER {
			t.Fatalf("%s with no leader: %v: want Unavailable NOT_LEADER", n.id, err)
		}
	}
	if fc.entries() != before {
		t.Fatal("a call with no leader reached the log")
	}
	fc.elect("n3")
	r, err := fc.node("n1").request(ctx, s, "fw", 1, "a")
	if err != nil || r.Status != pb.Status_STATUS_GRANTED {
		t.Fatalf("the old leader, now a follower, forwarding to n3: %v, %v", r, err)
	}
	if fc.entries() != before+1 {
		t.Fatalf("%d entries for one retried request, want 1", fc.entries()-before)
	}
}

// A follower that has not applied a session yet cannot judge its secret:
// it does not refuse the call, it forwards it to the leader, which can.
func TestLaggingFollowerForwardsWhatItCannotJudge(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	fc.hold("n3", true)
	s := fc.node("n1").open(t, "fw")
	if fc.node("n3").m.SessionKnown(s.SessionId) {
		t.Fatal("the held follower applied the open")
	}
	r, err := fc.node("n3").request(testCtx(t), s, "fw", 1, "a")
	if err != nil || r.Status != pb.Status_STATUS_GRANTED {
		t.Fatalf("request via a lagging follower: %v, %v: want granted by the leader", r, err)
	}
	// A wrong secret is refused wherever the session is known, before the
	// log, without asking the leader.
	fc.hold("n3", false)
	before := fc.entries()
	bad := &pb.OpenSessionResponse{SessionId: s.SessionId, Secret: make([]byte, 32)}
	if _, err := fc.node("n3").request(testCtx(t), bad, "fw", 2, "b"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("wrong secret on a follower: %v: want PermissionDenied", err)
	}
	if fc.entries() != before {
		t.Fatal("a forged request reached the log")
	}
}

// Copies of one request that arrive together are proposed once; copies
// that arrive after it was applied are answered from the leader's state.
// Either way the log holds one entry and every copy the same answer.
func TestCopiesOfARequestMakeOneEntry(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	s := fc.node("n1").open(t, "dup")
	before := fc.entries()
	ctx := testCtx(t)
	var wg sync.WaitGroup
	tokens := make([]uint64, 30)
	errs := make([]error, len(tokens))
	for i := range tokens {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := fc.nodes[i%3].request(ctx, s, "dup", 1, "a")
			if err == nil {
				tokens[i] = r.Token
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil || tokens[i] != tokens[0] {
			t.Fatalf("copy %d: token %d, %v: want token %d like the first", i, tokens[i], err, tokens[0])
		}
	}
	if n := fc.entries() - before; n != 1 {
		t.Fatalf("%d entries for 30 copies of one request, want 1", n)
	}
}

// A write whose outcome the replica cannot know (leadership lost after
// the append) reaches the caller as OUTCOME_UNKNOWN; its retry with the
// same request id is answered from the applied state, not applied twice.
func TestOutcomeUnknownThenRetry(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	s := fc.node("n1").open(t, "ou")
	fc.log.mu.Lock()
	fc.log.fail = func([]byte) (bool, error) { return true, raftnode.ErrOutcomeUnknown }
	fc.log.mu.Unlock()
	before := fc.entries()
	ctx := testCtx(t)
	if _, err := fc.node("n2").request(ctx, s, "ou", 1, "a"); status.Code(err) != codes.Unavailable || reasonOf(err) != pb.ErrorReason_OUTCOME_UNKNOWN {
		t.Fatalf("lost outcome: %v: want Unavailable OUTCOME_UNKNOWN", err)
	}
	fc.log.mu.Lock()
	fc.log.fail = nil
	fc.log.mu.Unlock()
	r, err := fc.node("n2").request(ctx, s, "ou", 1, "a")
	if err != nil || r.Status != pb.Status_STATUS_GRANTED {
		t.Fatalf("retry: %v, %v: want the applied grant", r, err)
	}
	if n := fc.entries() - before; n != 1 {
		t.Fatalf("%d entries after a lost outcome and its retry, want 1", n)
	}
}

// Join and Leave forward to the leader; leave of a non-member is
// NOT_MEMBER; Status and Members describe the replica.
func TestClusterCallsOnAFollower(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	ctx := testCtx(t)
	n2 := fc.node("n2")
	if _, err := n2.clus.Join(ctx, &pb.JoinRequest{Id: "n9", RaftAddr: "raft-n9", GrpcAddr: "api-n9"}); err != nil {
		t.Fatalf("join via a follower: %v", err)
	}
	ms, err := n2.clus.Members(ctx, &pb.MembersRequest{})
	if err != nil || len(ms.Members) != 4 {
		t.Fatalf("members after the join: %v, %v", ms, err)
	}
	eventually(t, "n9 in n2's member directory", func() bool { return len(n2.m.Members()) == 4 })
	if _, err := n2.clus.Leave(ctx, &pb.LeaveRequest{Id: "n9"}); err != nil {
		t.Fatalf("leave via a follower: %v", err)
	}
	if _, err := n2.clus.Leave(ctx, &pb.LeaveRequest{Id: "n9"}); status.Code(err) != codes.NotFound || reasonOf(err) != pb.ErrorReason_NOT_MEMBER {
		t.Fatalf("second leave: %v: want NotFound NOT_MEMBER", err)
	}
	st, err := n2.clus.Status(ctx, &pb.StatusRequest{})
	if err != nil || st.LeaderId != "n1" || st.LeaderAddr != "passthrough:///api-n1" || st.State != "Follower" || st.AppliedIndex != uint64(fc.entries()) {
		t.Fatalf("status of n2: %v, %v", st, err)
	}
}

// Query is linearizable: a follower that lags forwards it to the leader,
// whose answer includes every write acknowledged before the call.
func TestQueryOnALaggingFollowerReadsTheLeader(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	fc.hold("n3", true)
	s := fc.node("n1").open(t, "q")
	r, err := fc.node("n1").request(testCtx(t), s, "q", 1, "x")
	if err != nil {
		t.Fatal(err)
	}
	q, err := fc.node("n3").locks.Query(testCtx(t), &pb.QueryRequest{Namespace: "q"})
	if err != nil || len(q.Held) != 1 || q.Held[0].Token != r.Token || q.Index < r.Index {
		t.Fatalf("query on a lagging follower: %v, %v: want the grant at index >= %d", q, err, r.Index)
	}
	if got := fc.node("n3").rep.AppliedIndex(); got >= r.Index {
		t.Fatalf("the held node applied %d: the answer could have been its own", got)
	}
}

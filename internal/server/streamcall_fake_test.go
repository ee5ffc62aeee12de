package server

import (
	"context"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/hashicorp/go-hclog"
	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/testutil"
)

// Calls on the session stream (streamcall.go), on the fake cluster.

func (f *fakeStream) call(c *pb.StreamCall) {
	f.t.Helper()
	if err := f.st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Call{Call: c}}); err != nil {
		f.t.Fatal(err)
	}
}

// reply receives the next call reply (events and acks are skipped).
func (f *fakeStream) reply() *pb.CallReply {
	f.t.Helper()
	for {
		if r := f.recv().GetReply(); r != nil {
			return r
		}
	}
}

func lockCall(id uint64, s *pb.OpenSessionResponse, ns string, req uint64, name string) *pb.StreamCall {
	return &pb.StreamCall{Id: id, Call: &pb.StreamCall_Request{Request: &pb.LockRequest{Namespace: ns, SessionId: s.SessionId,
		SessionSecret: s.Secret, RequestId: req, Names: []string{name}, Mode: pb.Mode_MODE_EXCLUSIVE, Signal: true}}}
}

// A stream on a follower carries a session's request, release and abort:
// each reaches the log once, through the leader, and is answered on the
// stream with the unary call's response; a grant that a release decides
// arrives as an event, as before. The calls went through the unary
// interceptors (metrics, audit, auth, fence in production).
func TestCallsOnTheSessionStream(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	fc := newFakeCluster(t, 3, fakeOptions{configure: func(c *Config) {
		c.CallInterceptor = func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			mu.Lock()
			seen[c.Self.ID+" "+info.FullMethod]++
			mu.Unlock()
			return h(ctx, req)
		}
	}})
	a, b := fc.node("n1").open(t, "sc"), fc.node("n1").open(t, "sc")
	sa, synced := fc.node("n2").attach(t, a, "sc", a.Index)
	if !synced.Calls {
		t.Fatal("the Synced does not offer calls")
	}
	sb, _ := fc.node("n3").attach(t, b, "sc", b.Index)
	before := fc.entries()

	sa.call(lockCall(1, a, "sc", 1, "x"))
	if r := sa.reply(); r.Id != 1 || r.GetRequest().GetStatus() != pb.Status_STATUS_GRANTED {
		t.Fatalf("a's request on its stream: %v: want granted", r)
	}
	sb.call(lockCall(7, b, "sc", 1, "x"))
	if r := sb.reply(); r.Id != 7 || r.GetRequest().GetStatus() != pb.Status_STATUS_QUEUED {
		t.Fatalf("b's request: %v: want queued", r)
	}
	sa.call(&pb.StreamCall{Id: 2, Call: &pb.StreamCall_Release{Release: &pb.ReleaseRequest{Namespace: "sc", SessionId: a.SessionId, SessionSecret: a.Secret, RequestId: 1}}})
	rel := sa.reply()
	if rel.Id != 2 || rel.GetRelease().GetStatus() != pb.Status_STATUS_RELEASED {
		t.Fatalf("a's release: %v", rel)
	}
	if ev := sb.event(); ev.Kind != pb.Event_GRANTED || ev.Index != rel.GetRelease().GetIndex() {
		t.Fatalf("b's grant: %v: want granted at the release's index", ev)
	}
	sb.call(lockCall(8, b, "sc", 2, "y"))
	if r := sb.reply(); r.GetRequest().GetStatus() != pb.Status_STATUS_GRANTED {
		t.Fatalf("b's second request: %v", r)
	}
	sb.call(&pb.StreamCall{Id: 9, Call: &pb.StreamCall_Abort{Abort: &pb.AbortRequest{Namespace: "sc", SessionId: b.SessionId, SessionSecret: b.Secret, RequestId: 2}}})
	if r := sb.reply(); r.Id != 9 || r.GetAbort() == nil {
		t.Fatalf("b's abort: %v", r)
	}
	if n := fc.entries() - before; n != 5 {
		t.Fatalf("%d entries for five calls, want 5", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if seen["n2 "+pb.Locks_Request_FullMethodName] != 1 || seen["n2 "+pb.Locks_Release_FullMethodName] != 1 || seen["n3 "+pb.Locks_Abort_FullMethodName] != 1 {
		t.Fatalf("interceptor saw %v: want every stream call through the receiving node's interceptors", seen)
	}
}

// A stream acts only for its own session: a call naming another session
// or namespace is refused without reaching the log, a forged secret is
// refused as the unary call would be, and the stream carries on.
func TestStreamCallsActOnlyForTheStreamsSession(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	a, b := fc.node("n1").open(t, "own"), fc.node("n1").open(t, "own")
	sa, _ := fc.node("n2").attach(t, a, "own", a.Index)
	before := fc.entries()
	sa.call(lockCall(1, b, "own", 1, "x"))
	if r := sa.reply(); r.GetError().GetCode() != int32(codes.InvalidArgument) || r.GetError().GetReason() != pb.ErrorReason_INVALID {
		t.Fatalf("a call for another session: %v: want InvalidArgument", r)
	}
	other := lockCall(2, a, "own", 1, "x")
	other.GetRequest().Namespace = "elsewhere"
	sa.call(other)
	if r := sa.reply(); r.GetError().GetCode() != int32(codes.InvalidArgument) {
		t.Fatalf("a call for another namespace: %v: want InvalidArgument", r)
	}
	forged := lockCall(3, a, "own", 1, "x")
	forged.GetRequest().SessionSecret = make([]byte, 32)
	sa.call(forged)
	if r := sa.reply(); r.GetError().GetCode() != int32(codes.PermissionDenied) || r.GetError().GetReason() != pb.ErrorReason_PERMISSION {
		t.Fatalf("a forged secret: %v: want PermissionDenied", r)
	}
	if fc.entries() != before {
		t.Fatal("a refused stream call reached the log")
	}
	sa.acked() // the stream is still up
	sa.call(lockCall(4, a, "own", 1, "x"))
	if r := sa.reply(); r.GetRequest().GetStatus() != pb.Status_STATUS_GRANTED {
		t.Fatalf("a good call after the refusals: %v", r)
	}
}

// Calls on one stream run concurrently and each reply names its call.
func TestConcurrentStreamCalls(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	a := fc.node("n1").open(t, "many")
	sa, _ := fc.node("n3").attach(t, a, "many", a.Index)
	const n = 50
	for i := range uint64(n) {
		sa.call(lockCall(100+i, a, "many", 1+i, "lock-"+string(rune('a'+i%26))+string(rune('a'+i/26))))
	}
	got := map[uint64]bool{}
	for range n {
		r := sa.reply()
		if r.GetRequest() == nil || got[r.Id] || r.Id < 100 || r.Id >= 100+n {
			t.Fatalf("reply %v (seen %d)", r, len(got))
		}
		got[r.Id] = true
	}
	if held := len(fc.node("n1").m.Query("many").Held); held != n {
		t.Fatalf("%d held after %d calls for distinct names", held, n)
	}
	if _, ok := fc.commands(fc.entries())[0].(*fsm.Request); !ok {
		t.Fatal("the last entry is not a request")
	}
}

// A steal on a stream is audited as a unary one: once, by the node that
// took the call, although the leader applied it.
func TestStealOnAStreamIsAudited(t *testing.T) {
	var logs testutil.Buffer
	fc := newFakeCluster(t, 3, fakeOptions{configure: func(c *Config) {
		c.Logger = hclog.New(&hclog.LoggerOptions{Name: c.Self.ID, Output: &logs, Level: hclog.Info})
	}})
	a, b := fc.node("n1").open(t, "steal"), fc.node("n1").open(t, "steal")
	if r, err := fc.node("n1").request(testCtx(t), b, "steal", 1, "x"); err != nil || r.Status != pb.Status_STATUS_GRANTED {
		t.Fatalf("b: %v, %v", r, err)
	}
	sa, _ := fc.node("n2").attach(t, a, "steal", a.Index)
	steal := lockCall(1, a, "steal", 1, "x")
	steal.GetRequest().Steal, steal.GetRequest().Signal = true, false
	sa.call(steal)
	if r := sa.reply(); r.GetRequest().GetStatus() != pb.Status_STATUS_GRANTED {
		t.Fatalf("the steal: %v", r)
	}
	if n := strings.Count(logs.String(), "event=steal"); n != 1 {
		t.Fatalf("%d audit lines for one steal on a stream, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "n2.audit") {
		t.Fatalf("the steal was not audited by the node that took the call:\n%s", logs.String())
	}
}

package server

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/testutil"
)

// Limits on session streams (issue 24, finding 2): streams per session,
// and streams whose client does not read. And the attach of a session a
// follower does not know yet (finding 4).

// stallingClient is a connection to node id with fixed 64 KiB windows: a
// stream it does not read stops taking data after about that much.
func (fc *fakeCluster) stallingClient(t *testing.T, id string) pb.LocksClient {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///api-"+id,
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return fc.lis[addr].DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return pb.NewLocksClient(cc)
}

// attachOnly sends the attach of session s on a new stream of lc and
// returns the stream without reading anything.
func attachOnly(t *testing.T, lc pb.LocksClient, s *pb.OpenSessionResponse, ns string) pb.Locks_SessionClient {
	t.Helper()
	st, err := lc.Session(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Attach{Attach: &pb.Attach{Namespace: ns, SessionId: s.SessionId, MinIndex: s.Index, SessionSecret: s.Secret}}}); err != nil {
		t.Fatal(err)
	}
	return st
}

// grantBigScopes makes the leader grant stalled's queued request for a
// scope of 64 names of 1 KiB (an event of about 64 KiB on its stream),
// rounds times, holder taking the scope first each time.
func grantBigScopes(t *testing.T, n *fakeNode, ns string, holder, stalled *pb.OpenSessionResponse, first, rounds uint64) {
	t.Helper()
	if err := grantBigScopesErr(testCtx(t), n, ns, holder, stalled, first, rounds); err != nil {
		t.Fatal(err)
	}
}

func grantBigScopesErr(ctx context.Context, n *fakeNode, ns string, holder, stalled *pb.OpenSessionResponse, first, rounds uint64) error {
	names := scopeNames()
	for i := first; i < first+rounds; i++ {
		r, err := n.locks.Request(ctx, &pb.LockRequest{Namespace: ns, SessionId: holder.SessionId, SessionSecret: holder.Secret, RequestId: i, Names: names})
		if err != nil || r.Status != pb.Status_STATUS_GRANTED {
			return fmt.Errorf("round %d: holder: %v, %v", i, r, err)
		}
		r, err = n.locks.Request(ctx, &pb.LockRequest{Namespace: ns, SessionId: stalled.SessionId, SessionSecret: stalled.Secret, RequestId: i, Names: names})
		if err != nil || r.Status != pb.Status_STATUS_QUEUED {
			return fmt.Errorf("round %d: stalled session: %v, %v", i, r, err)
		}
		for _, s := range []*pb.OpenSessionResponse{holder, stalled} {
			if _, err := n.locks.Release(ctx, &pb.ReleaseRequest{Namespace: ns, SessionId: s.SessionId, SessionSecret: s.Secret, RequestId: i}); err != nil {
				return fmt.Errorf("round %d: release: %v", i, err)
			}
		}
	}
	return nil
}

// A session has at most MaxStreamsPerSession streams on a node: each
// attach past it ends the session's oldest stream there, with a retryable
// ResourceExhausted that says so, and is itself always let in; the
// session's other streams carry on.
func TestStreamsPerSessionReplaceTheOldest(t *testing.T) {
	const max = 3
	fc := newFakeCluster(t, 3, fakeOptions{configure: func(c *Config) { c.MaxStreamsPerSession = max }})
	n := fc.node("n2")
	s := n.open(t, "cap")
	var streams []*fakeStream
	for i := range max + 2 {
		st, _ := n.attach(t, s, "cap", s.Index)
		streams = append(streams, st)
		if got := n.srv.hub.streams(s.SessionId); got > max {
			t.Fatalf("after attach %d the session has %d streams on the node, over the cap of %d", i+1, got, max)
		}
	}
	// The two oldest were replaced, oldest first.
	for i, st := range streams[:2] {
		_, err := st.st.Recv()
		if status.Code(err) != codes.ResourceExhausted || reasonOf(err) != pb.ErrorReason_LIMIT ||
			!strings.Contains(status.Convert(err).Message(), "more than 3 streams") || !strings.Contains(status.Convert(err).Message(), "replaced") {
			t.Fatalf("stream %d: %v: want ResourceExhausted, LIMIT, saying it was replaced", i, err)
		}
	}
	// The newest three are attached and renew the session.
	for _, st := range streams[2:] {
		st.acked()
	}
	testutil.Eventually(t, 5*time.Second, "the replaced streams' handlers to return", func() bool { return n.srv.streams.Load() == max })
}

// A stream whose client never reads, once the hub cuts it for its
// backlog, ends at once even though its handler's Send is blocked on flow
// control: the handler returns, the stream's backlog is freed, and the
// client, when it reads at last, gets the events sent before the cut and
// then the resynchronise error. The connection stays usable.
func TestStalledStreamEndsWhileItsSendIsBlocked(t *testing.T) {
	fc := newFakeCluster(t, 1, fakeOptions{configure: func(c *Config) { c.StreamBacklogBytes = 256 << 10 }})
	n := fc.node("n1")
	lc := fc.stallingClient(t, "n1")
	holder, stalled := n.open(t, "stall"), n.open(t, "stall")
	st := attachOnly(t, lc, stalled, "stall")
	testutil.Eventually(t, 5*time.Second, "the stream to attach", func() bool { return n.srv.streams.Load() == 1 })
	// 64 KiB events: the client's window holds one, gRPC's write quota
	// another; the handler's next Send blocks; the backlog passes its cap
	// of 256 KiB a few events later.
	grantBigScopes(t, n, "stall", holder, stalled, 1, 12)
	testutil.Eventually(t, 5*time.Second, "the cut stream's handler to return, its client still connected and not reading",
		func() bool { return n.srv.streams.Load() == 0 })
	if got := n.srv.hub.streams(stalled.SessionId); got != 0 {
		t.Fatalf("the hub still has %d streams of the stalled session", got)
	}
	// The same connection serves a new stream of the session.
	if _, err := lc.Request(testCtx(t), &pb.LockRequest{Namespace: "stall", SessionId: stalled.SessionId, SessionSecret: stalled.Secret, RequestId: 100, Names: []string{"x"}}); err != nil {
		t.Fatalf("a call on the stalled client's connection: %v", err)
	}
	events := 0
	for {
		m, err := st.Recv()
		if err != nil {
			if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "resynchronise") {
				t.Fatalf("after %d events: %v: want the resynchronise error", events, err)
			}
			break
		}
		if m.GetEvent() != nil {
			events++
		}
	}
	if events >= 12 {
		t.Fatalf("the stalled stream got all %d events: it was not cut", events)
	}
}

// A stream whose client takes nothing for StreamSendTimeout is cut, even
// while its backlog is far under its cap: its handler returns.
func TestStreamCutAfterSendTimeout(t *testing.T) {
	fc := newFakeCluster(t, 1, fakeOptions{configure: func(c *Config) { c.StreamSendTimeout = 300 * time.Millisecond }})
	n := fc.node("n1")
	lc := fc.stallingClient(t, "n1")
	holder, stalled := n.open(t, "slow"), n.open(t, "slow")
	st := attachOnly(t, lc, stalled, "slow")
	testutil.Eventually(t, 5*time.Second, "the stream to attach", func() bool { return n.srv.streams.Load() == 1 })
	grantBigScopes(t, n, "slow", holder, stalled, 1, 4) // about 256 KiB: Send blocks, the 4 MiB backlog cap is far
	testutil.Eventually(t, 10*time.Second, "the stalled stream's handler to return", func() bool { return n.srv.streams.Load() == 0 })
	for {
		if _, err := st.Recv(); err != nil {
			if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "taken nothing") {
				t.Fatalf("%v: want the send timeout's error", err)
			}
			break
		}
	}
}

// A client that reads its stream slowly, a message at a time, is not cut
// by the send timeout, however long the messages waiting for it take in
// all: the timeout counts from the last message it took.
func TestSlowReaderIsNotCutBySendTimeout(t *testing.T) {
	const timeout = 2 * time.Second
	fc := newFakeCluster(t, 1, fakeOptions{configure: func(c *Config) { c.StreamSendTimeout = timeout }})
	n := fc.node("n1")
	lc := fc.stallingClient(t, "n1")
	holder, slow := n.open(t, "slow"), n.open(t, "slow")
	st := attachOnly(t, lc, slow, "slow")
	// Attached before the first grant: every grant is an event.
	testutil.Eventually(t, 5*time.Second, "the stream to attach", func() bool { return n.srv.streams.Load() == 1 })
	const rounds = 30 // about 2 MiB of events: most of them wait for the client
	granted := make(chan error, 1)
	go func() { granted <- grantBigScopesErr(testCtx(t), n, "slow", holder, slow, 1, rounds) }()
	// The reader's pace is what is tested, not a wait for something.
	pace := time.NewTicker(100 * time.Millisecond)
	defer pace.Stop()
	start, events := time.Now(), 0
	for events < rounds {
		<-pace.C
		m, err := st.Recv()
		if err != nil {
			t.Fatalf("after %d events in %s: %v", events, time.Since(start), err)
		}
		if m.GetEvent() != nil {
			events++
		}
	}
	if err := <-granted; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < timeout {
		t.Fatalf("the events took %s: the test needs them to take longer than the send timeout, %s", d, timeout)
	}
}

// A follower that does not know a session yet (a session opened a moment
// ago on the leader) decides its attach after catching up with the
// leader, as a unary call would be decided on the leader: the attach
// waits, without min_index, and succeeds; an unknown session or a wrong
// secret is still refused, after the same catch-up.
func TestAttachOfASessionTheFollowerDoesNotKnowYet(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	fc.hold("n3", true)
	s := fc.node("n1").open(t, "fresh")
	type res struct {
		synced *pb.Synced
		err    error
	}
	attach := func(at *pb.Attach) <-chan res {
		done := make(chan res, 1)
		go func() {
			st, err := fc.node("n3").locks.Session(testCtx(t))
			if err == nil {
				err = st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Attach{Attach: at}})
			}
			var m *pb.SessionDown
			if err == nil {
				m, err = st.Recv()
			}
			done <- res{m.GetSynced(), err}
		}()
		return done
	}
	good := attach(&pb.Attach{Namespace: "fresh", SessionId: s.SessionId, SessionSecret: s.Secret})
	select {
	case r := <-good:
		t.Fatalf("the attach was answered (%v, %v) before the follower had applied the session", r.synced, r.err)
	case <-time.After(100 * time.Millisecond):
	}
	fc.hold("n3", false)
	if r := <-good; r.err != nil || r.synced == nil {
		t.Fatalf("attach on the follower: %v, %v: want a Synced", r.synced, r.err)
	}
	for _, at := range []*pb.Attach{
		{Namespace: "fresh", SessionId: s.SessionId, SessionSecret: []byte("wrong")},
		{Namespace: "fresh", SessionId: s.SessionId + 1000, SessionSecret: s.Secret},
	} {
		if r := <-attach(at); status.Code(r.err) != codes.PermissionDenied {
			t.Fatalf("attach of session %d with secret %q: %v, %v: want PermissionDenied", at.SessionId, at.SessionSecret, r.synced, r.err)
		}
	}
}

// streams is how many streams of session the hub has.
func (h *hub) streams(session uint64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs[session])
}

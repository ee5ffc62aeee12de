package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
)

// Event fan-out and heartbeats on session streams, on servers over the
// in-memory replica (fake_test.go). The servers' clock is fake: a session
// expires only when the test moves the clock past its deadline.

type fakeStream struct {
	t  *testing.T
	st pb.Locks_SessionClient
	hb uint64
}

// attach opens session s's stream on node n and returns it once Synced.
func (n *fakeNode) attach(t *testing.T, s *pb.OpenSessionResponse, ns string, minIndex uint64) (*fakeStream, *pb.Synced) {
	t.Helper()
	st, err := n.locks.Session(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Attach{Attach: &pb.Attach{Namespace: ns, SessionId: s.SessionId, MinIndex: minIndex, SessionSecret: s.Secret}}}); err != nil {
		t.Fatal(err)
	}
	m, err := st.Recv()
	if err != nil || m.GetSynced() == nil {
		t.Fatalf("attach on %s: %v, %v: want a Synced", n.id, m, err)
	}
	return &fakeStream{t: t, st: st}, m.GetSynced()
}

// heartbeat sends one heartbeat and returns its id.
func (f *fakeStream) heartbeat() uint64 {
	f.t.Helper()
	f.hb++
	if err := f.st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Heartbeat{Heartbeat: &pb.Heartbeat{Id: f.hb}}}); err != nil {
		f.t.Fatal(err)
	}
	return f.hb
}

// acked sends heartbeats until one is acknowledged (a heartbeat nobody
// could renew gets no ack; the client sends the next).
func (f *fakeStream) acked() {
	f.t.Helper()
	for range 1000 {
		id := f.heartbeat()
		m := f.recv()
		if a := m.GetHeartbeatAck(); a != nil && a.Id == id {
			return
		}
		if m.GetHeartbeatAck() == nil {
			f.t.Fatalf("waiting for an ack: got %v", m)
		}
	}
	f.t.Fatal("no heartbeat acknowledged")
}

func (f *fakeStream) recv() *pb.SessionDown {
	f.t.Helper()
	m, err := f.st.Recv()
	if err != nil {
		f.t.Fatalf("stream: %v", err)
	}
	return m
}

// event receives the next event (acks of earlier heartbeats are skipped).
func (f *fakeStream) event() *pb.Event {
	f.t.Helper()
	for {
		if ev := f.recv().GetEvent(); ev != nil {
			return ev
		}
	}
}

func openTTL(t *testing.T, n *fakeNode, ns string, ttl time.Duration) *pb.OpenSessionResponse {
	t.Helper()
	s, err := n.locks.OpenSession(testCtx(t), &pb.OpenSessionRequest{Namespace: ns, Ttl: durationpb.New(ttl)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A grant decided by another session's release, on the leader, reaches
// the waiting session's stream on whichever node it is attached to, with
// the index of the release; the releasing session's stream, on another
// node, hears nothing of it.
func TestEventsFanOutToTheWaitersStream(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	ctx := testCtx(t)
	a, b := fc.node("n2").open(t, "fan"), fc.node("n3").open(t, "fan")
	sa, _ := fc.node("n2").attach(t, a, "fan", a.Index)
	sb, _ := fc.node("n3").attach(t, b, "fan", b.Index)
	if r, err := fc.node("n2").request(ctx, a, "fan", 1, "x"); err != nil || r.Status != pb.Status_STATUS_GRANTED {
		t.Fatalf("a: %v, %v", r, err)
	}
	if r, err := fc.node("n3").request(ctx, b, "fan", 1, "x"); err != nil || r.Status != pb.Status_STATUS_QUEUED {
		t.Fatalf("b: %v, %v: want queued behind a", r, err)
	}
	rel, err := fc.node("n1").locks.Release(ctx, &pb.ReleaseRequest{Namespace: "fan", SessionId: a.SessionId, SessionSecret: a.Secret, RequestId: 1})
	if err != nil {
		t.Fatal(err)
	}
	ev := sb.event()
	if ev.Kind != pb.Event_GRANTED || ev.RequestId != 1 || ev.Index != rel.Index || ev.Token == 0 {
		t.Fatalf("b's stream on n3: %v: want request 1 granted at the release's index %d", ev, rel.Index)
	}
	// a's stream carries a's own end only: close a, and the first event a
	// sees is its session's end, not b's grant.
	if _, err := fc.node("n1").locks.CloseSession(ctx, &pb.CloseSessionRequest{Namespace: "fan", SessionId: a.SessionId, SessionSecret: a.Secret}); err != nil {
		t.Fatal(err)
	}
	if ev := sa.event(); ev.Kind != pb.Event_SESSION_ENDED {
		t.Fatalf("a's stream on n2: %v: want only its session's end", ev)
	}
}

// A stream attaches on a node only once that node has applied the index
// the client has seen: a lagging node answers the attach after it caught
// up, never with older state than the client knew.
func TestAttachWaitsForTheClientsIndex(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	fc.hold("n3", true)
	s := fc.node("n1").open(t, "att")
	r, err := fc.node("n1").request(testCtx(t), s, "att", 1, "x")
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		synced *pb.Synced
		err    error
	}
	done := make(chan res, 1)
	go func() {
		st, err := fc.node("n3").locks.Session(testCtx(t))
		if err == nil {
			err = st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Attach{Attach: &pb.Attach{Namespace: "att", SessionId: s.SessionId, MinIndex: r.Index, SessionSecret: s.Secret}}})
		}
		var m *pb.SessionDown
		if err == nil {
			m, err = st.Recv()
		}
		done <- res{m.GetSynced(), err}
	}()
	if got := fc.node("n3").rep.AppliedIndex(); got >= r.Index {
		t.Fatalf("the held node applied %d", got)
	}
	fc.hold("n3", false)
	out := <-done
	if out.err != nil || out.synced == nil || out.synced.Index < r.Index || len(out.synced.Requests) != 1 || out.synced.Requests[0].Status != pb.Status_STATUS_GRANTED {
		t.Fatalf("attach on a node that caught up: %v, %v: want a Synced at index >= %d with the grant", out.synced, out.err, r.Index)
	}
}

// Heartbeats through a follower renew the session on the leader: it lives
// as long as they come, however far the clock moves, and expires, with
// its end on the stream, once they stop.
func TestHeartbeatsThroughAFollowerKeepTheSession(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	const ttl = time.Second
	s := openTTL(t, fc.node("n1"), "hb", ttl)
	st, _ := fc.node("n2").attach(t, s, "hb", s.Index)
	for range 5 {
		fc.clock.Advance(ttl * 9 / 10)
		st.acked()
	}
	if _, ok := fc.node("n1").m.Session(s.SessionId); !ok {
		t.Fatal("the session expired although every heartbeat was acknowledged")
	}
	before := fc.entries()
	fc.clock.Advance(2 * ttl)
	if ev := st.event(); ev.Kind != pb.Event_SESSION_ENDED {
		t.Fatalf("after the heartbeats stopped: %v: want the session's end", ev)
	}
	cmds := fc.commands(before + 1)
	if len(cmds) != 1 {
		t.Fatalf("entries after the heartbeats stopped: %v: want one expiry", cmds)
	}
	if e, ok := cmds[0].(*fsm.ExpireSession); !ok || e.Session != s.SessionId {
		t.Fatalf("entry %T %v: want the session's expiry", cmds[0], cmds[0])
	}
}

// Heartbeats that reach a follower together go to the leader in one
// Touch call, not one each; every one is acknowledged.
func TestFollowerBatchesHeartbeats(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{configure: func(c *Config) { c.HeartbeatFlush = 50 * time.Millisecond }})
	const n = 20
	streams := make([]*fakeStream, n)
	for i := range streams {
		s := openTTL(t, fc.node("n1"), "batch", time.Minute)
		streams[i], _ = fc.node("n2").attach(t, s, "batch", s.Index)
	}
	before := fc.touches["n1"].Load()
	ids := make([]uint64, n)
	for i, st := range streams {
		ids[i] = st.heartbeat()
	}
	for i, st := range streams {
		if a := st.recv().GetHeartbeatAck(); a == nil || a.Id != ids[i] {
			t.Fatalf("stream %d: %v: want the ack of heartbeat %d", i, a, ids[i])
		}
	}
	if calls := fc.touches["n1"].Load() - before; calls < 1 || calls >= n {
		t.Fatalf("%d heartbeats through a follower made %d Touch calls to the leader: want fewer than one each", n, calls)
	}
}

// After a leadership change the new leader renews the sessions: a stream
// on a third node keeps its session alive through it, and the expiry,
// once heartbeats stop, is the new leader's.
func TestHeartbeatsFollowANewLeader(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	const ttl = time.Second
	s := openTTL(t, fc.node("n1"), "lc", ttl)
	st, _ := fc.node("n3").attach(t, s, "lc", s.Index)
	st.acked()
	fc.elect("n2")
	for range 3 {
		fc.clock.Advance(ttl * 9 / 10)
		st.acked() // no ack until n2 has re-armed; then through n2
	}
	if _, ok := fc.node("n2").m.Session(s.SessionId); !ok {
		t.Fatal("the session expired across the leadership change")
	}
	fc.clock.Advance(2 * ttl)
	if ev := st.event(); ev.Kind != pb.Event_SESSION_ENDED {
		t.Fatalf("after the heartbeats stopped: %v: want the session's end", ev)
	}
}

// A node that has known no leader for longer than an election takes
// (noLeaderGrace) ends the stream at the next heartbeat it cannot have
// renewed, so the client moves to a node that can; not sooner: during an
// election every stream ending at once is a reconnect storm (issue 21).
func TestStreamEndsWhenNoLeaderIsKnown(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	s := openTTL(t, fc.node("n1"), "nl", time.Minute)
	st, _ := fc.node("n2").attach(t, s, "nl", s.Index)
	ended := make(chan time.Duration, 1)
	fc.elect("")
	lost := fc.clock.Now()
	go func() {
		for {
			m, err := st.st.Recv()
			if err == nil && m.GetHeartbeatAck() != nil {
				continue
			}
			if status.Code(err) != codes.Unavailable || reasonOf(err) != pb.ErrorReason_NOT_LEADER {
				t.Errorf("heartbeat with no leader: %v, %v: want the stream ended Unavailable NOT_LEADER", m, err)
			}
			ended <- fc.clock.Now().Sub(lost)
			return
		}
	}()
	step := noLeaderGrace / 4
	for {
		st.heartbeat()
		select {
		case after := <-ended:
			if after < noLeaderGrace {
				t.Fatalf("the stream ended %s after the leader was lost: want no sooner than %s", after, noLeaderGrace)
			}
			return
		case <-time.After(20 * time.Millisecond): // the heartbeat's answer is asynchronous
		}
		if fc.clock.Now().Sub(lost) > 4*noLeaderGrace {
			t.Fatal("the stream did not end with no leader known")
		}
		fc.clock.Advance(step)
	}
}

// A stream whose session has ended is told so and closed.
func TestStreamOfAnEndedSession(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	s := openTTL(t, fc.node("n1"), "end", time.Minute)
	if _, err := fc.node("n1").locks.CloseSession(testCtx(t), &pb.CloseSessionRequest{Namespace: "end", SessionId: s.SessionId, SessionSecret: s.Secret}); err != nil {
		t.Fatal(err)
	}
	st, err := fc.node("n2").locks.Session(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Attach{Attach: &pb.Attach{Namespace: "end", SessionId: s.SessionId, SessionSecret: s.Secret}}}); err != nil {
		t.Fatal(err)
	}
	if m, err := st.Recv(); status.Code(err) != codes.FailedPrecondition || reasonOf(err) != pb.ErrorReason_SESSION_CLOSED {
		t.Fatalf("attach of an ended session: %v, %v: want FailedPrecondition SESSION_CLOSED", m, err)
	}
}

// Attaches beyond the node's bound are refused at once with a retryable
// Unavailable (NOT_READY), before any work is done for them; once a slot
// frees, an attach goes through again (issue 21).
func TestAttachesBeyondTheBoundAreShed(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{configure: func(c *Config) { c.AttachesInFlight, c.AttachQueue = 1, -1 }})
	s := openTTL(t, fc.node("n1"), "adm", time.Minute)
	n2 := fc.node("n2")

	// A holds the only slot: it waits for an index the node has not applied.
	actx, acancel := context.WithCancel(testCtx(t))
	a, err := n2.locks.Session(actx)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Send(&pb.SessionUp{Kind: &pb.SessionUp_Attach{Attach: &pb.Attach{Namespace: "adm", SessionId: s.SessionId, MinIndex: s.Index + 1000, SessionSecret: s.Secret}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "A to hold the slot", func() bool { return len(n2.srv.attaches.slots) == 1 })

	b, err := n2.locks.Session(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Send(&pb.SessionUp{Kind: &pb.SessionUp_Attach{Attach: &pb.Attach{Namespace: "adm", SessionId: s.SessionId, MinIndex: s.Index, SessionSecret: s.Secret}}}); err != nil {
		t.Fatal(err)
	}
	m, err := b.Recv()
	if status.Code(err) != codes.Unavailable || reasonOf(err) != pb.ErrorReason_NOT_READY {
		t.Fatalf("an attach beyond the bound: %v, %v: want Unavailable NOT_READY", m, err)
	}
	if d, ok := retryInfoOf(err); !ok || d < attachRetryMin || d > attachRetryMin+attachRetryWindow {
		t.Fatalf("the refusal asks to retry after %s (%v): want a RetryInfo within [%s, %s]", d, ok, attachRetryMin, attachRetryMin+attachRetryWindow)
	}
	if n2.srv.attaches.shed.Load() != 1 {
		t.Fatalf("shed %d attaches, want 1", n2.srv.attaches.shed.Load())
	}

	acancel() // A gives up: its slot frees
	eventually(t, "A's slot to free", func() bool { return len(n2.srv.attaches.slots) == 0 })
	n2.attach(t, s, "adm", s.Index)
}

// retryInfoOf returns the delay a status error's RetryInfo asks for.
func retryInfoOf(err error) (time.Duration, bool) {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.RetryDelay.AsDuration(), true
		}
	}
	return 0, false
}

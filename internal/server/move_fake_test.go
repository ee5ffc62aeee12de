package server

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/auth"
	"github.com/lockcluster/lockcluster/session"
)

// The server side of a move of slots between groups (groups.md I3, §8.2):
// renewals refused by ownership before and after the confirmation of
// leadership, streams ended MOVING at a Freeze, and deadlines dropped at
// a Freeze and armed with a full TTL at an Import or an Unfreeze. The
// clusters are group 0 (fsm.New), which may freeze a slot to group 1, or
// group 1 (fsm.NewGroup), which imports one.

// freeze proposes the Freeze of namespace ns's slot to group 1 at epoch 1
// on the leader n1.
func (fc *fakeCluster) freeze(t *testing.T, ns string) {
	t.Helper()
	res, err := fc.node("n1").srv.ProposeMove(testCtx(t), &fsm.Freeze{Slots: []uint16{fsm.Slot(ns)}, Epoch: 1, To: 1})
	if err != nil || res.Err != nil || res.Duplicate {
		t.Fatalf("Freeze of %s: %+v, %v", ns, res, err)
	}
}

// streamErr waits, for at most bound, for the stream to end, skipping
// what comes before (acks of earlier heartbeats), and returns its error
// and how long it took; it fails the test if the stream carries an ack of
// heartbeat noAck (0: any ack is fine) or is still open after bound.
func (f *fakeStream) streamErr(bound time.Duration, noAck uint64) (time.Duration, error) {
	f.t.Helper()
	start := time.Now()
	type res struct {
		m   *pb.SessionDown
		err error
	}
	for {
		ch := make(chan res, 1)
		go func() { m, err := f.st.Recv(); ch <- res{m, err} }()
		select {
		case r := <-ch:
			if r.err != nil {
				return time.Since(start), r.err
			}
			if a := r.m.GetHeartbeatAck(); a != nil && noAck != 0 && a.Id == noAck {
				f.t.Fatalf("heartbeat %d was acknowledged after its slot froze", noAck)
			}
		case <-time.After(bound - time.Since(start)):
			f.t.Fatalf("the stream is still open %s after its slot froze", bound)
		}
	}
}

// moveBound bounds how long a stream may take to end once its slot froze:
// nothing waits for a heartbeat or a timer, so this is only the race
// detector's and a shared 2-core machine's slack.
const moveBound = 5 * time.Second

// Touch answers the sessions of a frozen slot in moved, never in unknown
// (which would end them); a session it does not know still comes back
// unknown, and one of a slot still served is renewed.
func TestTouchAnswersFrozenSessionsMoved(t *testing.T) {
	fc := newFakeCluster(t, 2, fakeOptions{})
	ctx := testCtx(t)
	mv, stay := openTTL(t, fc.node("n1"), "mv", time.Minute), openTTL(t, fc.node("n1"), "stay", time.Minute)
	if fsm.Slot("mv") == fsm.Slot("stay") {
		t.Fatal("the test's namespaces share a slot")
	}
	fc.freeze(t, "mv")
	const never = 1 << 40
	unknown, moved, err := forwarder{fc.node("n2").srv}.Touch(ctx, []uint64{never, mv.SessionId, stay.SessionId})
	if err != nil || !slices.Equal(unknown, []uint64{never}) || !slices.Equal(moved, []uint64{mv.SessionId}) {
		t.Fatalf("Touch after the Freeze: unknown %v, moved %v, %v: want unknown [%d] and moved [%d]", unknown, moved, err, uint64(never), mv.SessionId)
	}
	// The router of a node of several groups, and any caller, sees the
	// same on the wire.
	md := metadata.Pairs(auth.MemberSecretKey, auth.MemberSecretValue(fc.node("n1").m.ClusterSecret()))
	resp, err := fc.node("n1").clus.Touch(metadata.NewOutgoingContext(ctx, md), &pb.TouchRequest{SessionIds: []uint64{mv.SessionId}})
	if err != nil || len(resp.Unknown) != 0 || !slices.Equal(resp.Moved, []uint64{mv.SessionId}) {
		t.Fatalf("the leader's Touch: %v, %v: want moved [%d] only", resp, err, mv.SessionId)
	}
}

// A slot frozen after the leader renewed a follower's batch, but before
// the confirmation of leadership that covers the renewal has returned:
// the leader's Touch answers the session moved (it checks ownership again
// once Renew returns), so the heartbeat is not acknowledged, and the
// follower, whose own replica has not applied the Freeze yet, ends the
// stream MOVING (Unavailable, "moving"), not "closed". The same when the
// whole move ends within the round (a Drop too): the leader's machine no
// longer knows the session, which is neither renewed nor ended.
func TestFreezeDuringTheConfirmationIsNotAcknowledged(t *testing.T) {
	for _, drop := range []bool{false, true} {
		t.Run(map[bool]string{false: "freeze", true: "freeze and drop"}[drop], func(t *testing.T) {
			fc := newFakeCluster(t, 2, fakeOptions{})
			s := openTTL(t, fc.node("n1"), "mv", time.Minute)
			st, _ := fc.node("n2").attach(t, s, "mv", s.Index)
			st.acked()
			fc.hold("n2", true) // n2 will not see the Freeze: only the leader's answer tells it
			n1 := fc.node("n1")
			before := fc.touches["n1"].Load()
			fired := make(chan struct{})
			hook := func() {
				// The first barrier after n2's Touch reached n1: Renew's
				// confirmation (Touch takes no other barrier).
				if fc.touches["n1"].Load() == before || !n1.rep.onBarrier.CompareAndSwap(n1.rep.onBarrier.Load(), nil) {
					return
				}
				slots := []uint16{fsm.Slot("mv")}
				cmds := []fsm.Command{&fsm.Freeze{Slots: slots, Epoch: 1, To: 1}}
				if drop {
					cmds = append(cmds, &fsm.Drop{Slots: slots, Epoch: 1})
				}
				for _, c := range cmds {
					if res, err := n1.srv.ProposeMove(context.Background(), c); err != nil || res.Err != nil {
						t.Errorf("%T during the confirmation: %+v, %v", c, res, err)
					}
				}
				close(fired)
			}
			n1.rep.onBarrier.Store(&hook)
			hb := st.heartbeat()
			_, err := st.streamErr(moveBound, hb)
			select {
			case <-fired:
			default:
				t.Fatalf("the stream ended (%v) before the Freeze", err)
			}
			isMoving(t, "the stream of a session frozen during its confirmation", err, "mv")
			if _, ok := n1.m.Session(s.SessionId); ok == drop {
				t.Fatalf("the session is known to the source: %v, after a Drop: %v", ok, drop)
			}
		})
	}
}

// On the leader, the answer to a renewal comes after the confirmation: a
// heartbeat answered "known" is acknowledged only if the slot is still
// served then, else the stream ends MOVING; a follower's batch answered
// ErrMoved ends it MOVING too, from the replica's own refusal when it has
// one, else from the namespace alone. Every answer here is to a renewal
// made before the Freeze (the machine's SlotsLost was 0 then).
func TestHeartbeatAnswerChecksOwnership(t *testing.T) {
	m := fsm.New()
	sid := m.Apply(1, fsm.Entry{Cmd: &fsm.OpenSession{Namespace: "mv", TTL: 1e9}}).Result.Session
	s := New(Config{Machine: m})
	answer := func(known bool, err error) (*pb.SessionDown, error) {
		out := make(chan *pb.SessionDown, 1)
		var failed error
		h := &heartbeater{s: s, ctx: context.Background(), id: sid, ns: "mv", out: out, fail: func(err error) { failed = err }}
		h.done(7, 0, known, err)
		select {
		case m := <-out:
			return m, failed
		default:
			return nil, failed
		}
	}
	if m, err := answer(true, nil); err != nil || m.GetHeartbeatAck().GetId() != 7 {
		t.Fatalf("a renewal of a served slot: %v, %v: want the ack", m, err)
	}
	m2, err := answer(false, session.ErrMoved)
	if m2 != nil {
		t.Fatalf("ErrMoved: sent %v", m2)
	}
	isMoving(t, "ErrMoved on a replica that still serves the slot", err, "mv")

	if res := m.Apply(2, fsm.Entry{Cmd: &fsm.Freeze{Slots: []uint16{fsm.Slot("mv")}, Epoch: 1, To: 1}}).Result; res.Err != nil {
		t.Fatal(res.Err)
	}
	m2, err = answer(true, nil)
	if m2 != nil {
		t.Fatalf("a renewal confirmed after the Freeze: sent %v", m2)
	}
	isMoving(t, "a renewal confirmed after the Freeze", err, "mv")
	m2, err = answer(false, session.ErrMoved)
	if m2 != nil {
		t.Fatalf("ErrMoved after the Freeze: sent %v", m2)
	}
	isMoving(t, "ErrMoved on a replica that applied the Freeze", err, "mv")

	// Dropped (the move finished) before the answer: "moved", still
	// Unavailable, never an ack nor "closed".
	if res := m.Apply(3, fsm.Entry{Cmd: &fsm.Drop{Slots: []uint16{fsm.Slot("mv")}, Epoch: 1}}).Result; res.Err != nil {
		t.Fatal(res.Err)
	}
	m2, err = answer(true, nil)
	if st := status.Convert(err); m2 != nil || st.Code() != codes.Unavailable || errorInfo(st) == nil || errorInfo(st).Metadata["moved"] != "true" {
		t.Fatalf("a renewal confirmed after the Drop: sent %v, %v: want no ack and Unavailable moved", m2, err)
	}
}

// A Freeze ends the slot's session streams MOVING at once, on the leader
// and on a follower, without waiting for a heartbeat; the source's leader
// drops the sessions' deadlines (it no longer renews, nor expires, them),
// while it still expires the sessions of the slots it serves.
func TestFreezeEndsStreamsAndDeadlines(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	const ttl = 500 * time.Millisecond
	s := openTTL(t, fc.node("n1"), "mv", ttl)
	ctl := openTTL(t, fc.node("n1"), "stay", 2*ttl) // expires later than s would
	other := openTTL(t, fc.node("n1"), "mv", time.Minute)
	onLeader, _ := fc.node("n1").attach(t, s, "mv", s.Index)
	onFollower, _ := fc.node("n2").attach(t, s, "mv", s.Index)
	otherSt, _ := fc.node("n3").attach(t, other, "mv", other.Index)
	onLeader.acked()
	onFollower.acked()
	otherSt.acked()
	frozenAt := fc.entries()
	fc.freeze(t, "mv")
	for name, st := range map[string]*fakeStream{"leader": onLeader, "follower": onFollower, "another session's": otherSt} {
		after, err := st.streamErr(moveBound, 0)
		isMoving(t, "the "+name+" stream after the Freeze", err, "mv")
		t.Logf("the %s stream ended MOVING %s after the Freeze was applied", name, after)
	}
	// No deadline left: the leader answers the session as one it does not
	// hold (its Touch says moved: TestTouchAnswersFrozenSessionsMoved).
	if unknown, err := fc.node("n1").srv.live.Renew(testCtx(t), s.SessionId, ctl.SessionId); err != nil || !slices.Equal(unknown, []uint64{s.SessionId}) {
		t.Fatalf("Renew on the source's leader after the Freeze: %v, %v: want s's deadline gone", unknown, err)
	}
	fc.clock.Advance(10 * ttl)
	eventually(t, "the control session's expiry", func() bool {
		_, ok := fc.node("n1").m.Session(ctl.SessionId)
		return !ok
	})
	for _, c := range fc.commands(frozenAt + 1) {
		if e, ok := c.(*fsm.ExpireSession); ok && (e.Session == s.SessionId || e.Session == other.SessionId) {
			t.Fatalf("the source's leader proposed the expiry of frozen session %d", e.Session)
		}
	}
	if _, ok := fc.node("n1").m.Session(s.SessionId); !ok {
		t.Fatal("the frozen session is gone from the source")
	}
}

// An Unfreeze (an aborted move) gives the slot back to the source, whose
// leader arms its sessions again with a full TTL: a stream re-attaches
// and is acknowledged, and the session expires once heartbeats stop.
func TestUnfreezeArmsTheSessionsAgain(t *testing.T) {
	fc := newFakeCluster(t, 2, fakeOptions{})
	const ttl = time.Second
	s := openTTL(t, fc.node("n1"), "mv", ttl)
	st, _ := fc.node("n2").attach(t, s, "mv", s.Index)
	st.acked()
	fc.freeze(t, "mv")
	_, err := st.streamErr(moveBound, 0)
	isMoving(t, "the stream after the Freeze", err, "mv")
	fc.clock.Advance(10 * ttl) // while frozen: nothing expires it
	res, err := fc.node("n1").srv.ProposeMove(testCtx(t), &fsm.Unfreeze{Slots: []uint16{fsm.Slot("mv")}, Epoch: 1})
	if err != nil || res.Err != nil {
		t.Fatalf("Unfreeze: %+v, %v", res, err)
	}
	if _, ok := fc.node("n1").m.Session(s.SessionId); !ok {
		t.Fatal("the session expired while its slot was frozen")
	}
	st, _ = fc.node("n2").attach(t, s, "mv", 0)
	for range 3 {
		fc.clock.Advance(ttl * 9 / 10)
		st.acked()
	}
	fc.clock.Advance(2 * ttl)
	if ev := st.event(); ev.Kind != pb.Event_SESSION_ENDED {
		t.Fatalf("after the heartbeats stopped: %v: want the session's end", ev)
	}
}

// The target's leader arms the sessions an Import brings with a full
// Expiry(TTL) from the Import: one without heartbeats expires no sooner
// (not at its TTL, not at any deadline the source had) and no later;
// heartbeats, through a follower, keep another alive past it.
func TestImportArmsTheSessionsWithAFullTTL(t *testing.T) {
	const ns = "imp"
	const ttl = time.Second
	slots := []uint16{fsm.Slot(ns)}
	// The source: two sessions of ns, frozen, exported.
	src := fsm.New()
	open := func(idx uint64, secret string) uint64 {
		res := src.Apply(idx, fsm.Entry{Cmd: &fsm.OpenSession{Namespace: ns, TTL: int64(ttl), SecretHash: fsm.HashSecret([]byte(secret))}}).Result
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		return res.Session
	}
	idle, live := open(1, "idle"), open(2, "live")
	if res := src.Apply(3, fsm.Entry{Cmd: &fsm.Freeze{Slots: slots, Epoch: 1, To: 1}}).Result; res.Err != nil {
		t.Fatal(res.Err)
	}
	x, err := src.Export(slots, 1)
	if err != nil {
		t.Fatal(err)
	}

	fc := newFakeCluster(t, 2, fakeOptions{machine: func() *fsm.Machine { return fsm.NewGroup(1) }})
	n1 := fc.node("n1")
	propose := func(cmd fsm.Command) {
		t.Helper()
		if res, err := n1.srv.ProposeMove(testCtx(t), cmd); err != nil || res.Err != nil {
			t.Fatalf("%T: %+v, %v", cmd, res, err)
		}
	}
	propose(&fsm.SetGroup{Group: 1})
	for _, c := range x.ImportChunks() {
		propose(c)
	}
	fc.clock.Advance(time.Hour) // the source's deadlines, whatever they were, are long past
	imported := fc.entries() + 1
	propose(x.Import())
	start := fc.clock.Now()
	// A control session, opened at the Import, whose Expiry falls between
	// the TTL and the Expiry(TTL) of the imported ones.
	ctl := openTTL(t, n1, ns, 940*time.Millisecond)
	if e := session.Expiry(940 * time.Millisecond); e <= ttl || e >= session.Expiry(ttl) {
		t.Fatalf("the control's Expiry %s is not between %s and %s", e, ttl, session.Expiry(ttl))
	}
	st, _ := fc.node("n2").attach(t, &pb.OpenSessionResponse{SessionId: live, Secret: []byte("live")}, ns, 0)
	st.acked()
	fc.clock.Advance(600 * time.Millisecond)
	st.acked()
	fc.clock.Advance(session.Expiry(ttl) - 50*time.Millisecond - fc.clock.Now().Sub(start)) // past the control's
	st.acked()
	eventually(t, "the control session's expiry", func() bool {
		_, ok := n1.m.Session(ctl.SessionId)
		return !ok
	})
	st.acked() // one more round trip: an early expiry proposed beside the control's is in the log by now
	for _, c := range fc.commands(imported) {
		if e, ok := c.(*fsm.ExpireSession); ok && e.Session == idle {
			t.Fatalf("the imported session expired %s after the Import, before its full Expiry(TTL) %s", fc.clock.Now().Sub(start), session.Expiry(ttl))
		}
	}
	fc.clock.Advance(60 * time.Millisecond) // past Expiry(TTL) from the Import, and a tick
	eventually(t, "the idle imported session's expiry", func() bool {
		_, ok := n1.m.Session(idle)
		return !ok
	})
	if _, ok := n1.m.Session(live); !ok {
		t.Fatal("the imported session kept alive by heartbeats expired")
	}
	for range 3 {
		fc.clock.Advance(ttl * 9 / 10)
		st.acked()
	}
	if _, ok := n1.m.Session(live); !ok {
		t.Fatal("the imported session kept alive by heartbeats expired")
	}
}

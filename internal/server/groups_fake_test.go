package server

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
)

// isMoving reports whether err is the answer of a group that does not
// serve namespace ns's slot: a retryable Unavailable, NOT_READY, with
// "moving" and the slot in its metadata; never FailedPrecondition, which
// ends a client's session (groups.md §3.1).
func isMoving(t *testing.T, what string, err error, ns string) {
	t.Helper()
	st := status.Convert(err)
	info := errorInfo(st)
	if st.Code() != codes.Unavailable || info == nil || info.Reason != pb.ErrorReason_NOT_READY.String() ||
		info.Metadata["moving"] != "true" || info.Metadata["slot"] != strconv.Itoa(int(fsm.Slot(ns))) {
		t.Fatalf("%s: %v (%v), want Unavailable NOT_READY moving on slot %d", what, err, info, fsm.Slot(ns))
	}
}

// A cluster whose machines are a group that owns no slot (fsm.NewGroup(1):
// what a group ≥ 1 is until its first Import) answers every call of a
// namespace "moving", through the leader and through a follower, and
// never "session closed" or an empty answer. Group 0 never does (the rest
// of the suite).
func TestAGroupThatDoesNotOwnTheSlotAnswersMoving(t *testing.T) {
	fc := newFakeCluster(t, 2, fakeOptions{machine: func() *fsm.Machine { return fsm.NewGroup(1) }})
	ctx := testCtx(t)
	const ns = "elsewhere"
	for _, n := range fc.nodes {
		_, err := n.locks.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: ns})
		isMoving(t, n.id+": OpenSession", err, ns)
		_, err = n.locks.Request(ctx, &pb.LockRequest{Namespace: ns, SessionId: 5, RequestId: 1, Names: []string{"a"}, Mode: pb.Mode_MODE_EXCLUSIVE, SessionSecret: []byte("x")})
		isMoving(t, n.id+": Request", err, ns)
		_, err = n.locks.CloseSession(ctx, &pb.CloseSessionRequest{Namespace: ns, SessionId: 5, SessionSecret: []byte("x")})
		isMoving(t, n.id+": CloseSession", err, ns)
		_, err = n.locks.Query(ctx, &pb.QueryRequest{Namespace: ns})
		isMoving(t, n.id+": Query", err, ns)
		qp, err := n.locks.QueryPages(ctx, &pb.QueryRequest{Namespace: ns})
		if err == nil {
			_, err = qp.Recv()
		}
		isMoving(t, n.id+": QueryPages", err, ns)
		_, err = n.locks.GetRecord(ctx, &pb.GetRecordRequest{Namespace: ns, Name: "a"})
		isMoving(t, n.id+": GetRecord", err, ns)
		for _, from := range []uint64{0, 1} {
			w, err := n.locks.Watch(ctx, &pb.WatchRequest{Namespace: ns, FromIndex: from})
			if err == nil {
				_, err = w.Recv()
			}
			isMoving(t, n.id+": Watch from "+strconv.FormatUint(from, 10), err, ns)
		}
		st, err := n.locks.Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Attach{Attach: &pb.Attach{Namespace: ns, SessionId: 5, SessionSecret: []byte("x")}}}); err != nil {
			t.Fatal(err)
		}
		_, err = st.Recv()
		isMoving(t, n.id+": attach", err, ns)
	}
}

// The end of a session stream asks ownership first: "moving" on a group
// that does not serve the slot, and on group 0 "closed", word for word as
// before.
func TestSessionEndedAsksOwnershipFirst(t *testing.T) {
	s := New(Config{Machine: fsm.NewGroup(1)})
	isMoving(t, "group 1", s.sessionEnded("ns", 9, "has ended"), "ns")

	s = New(Config{Machine: fsm.New()})
	err := s.sessionEnded("ns", 9, "has ended")
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition || st.Message() != "session 9 has ended" ||
		errorInfo(st) == nil || errorInfo(st).Reason != pb.ErrorReason_SESSION_CLOSED.String() {
		t.Fatalf("group 0: %v, want FailedPrecondition SESSION_CLOSED %q", err, "session 9 has ended")
	}
	if err := s.owns("ns", 9); err != nil {
		t.Fatalf("group 0 owns: %v", err)
	}
}

// With every slot owned (group 0) Touch's ownership check passes the ids
// through unchanged, without a copy.
func TestOwnedSessionsOfGroupZero(t *testing.T) {
	s := New(Config{Machine: fsm.New()})
	ids := []uint64{3, 1, 2}
	owned, refused := s.ownedSessions(ids)
	if refused != nil || !slices.Equal(owned, ids) || &owned[0] != &ids[0] {
		t.Fatalf("ownedSessions = %v, %v: want the ids themselves and none refused", owned, refused)
	}
	// Unknown sessions pass (liveness answers them unknown), on any group.
	s = New(Config{Machine: fsm.NewGroup(1)})
	if owned, refused := s.ownedSessions(ids); refused != nil || !slices.Equal(owned, ids) {
		t.Fatalf("group 1, unknown sessions: %v, %v", owned, refused)
	}
}

// The hub keeps raw indexes and converts at its edges: an event carries
// its entry's logical index, and waitLogical compares a client's index
// with the logical applied one (an offset of 100 here; 0 with one group).
func TestHubConvertsToLogicalIndexes(t *testing.T) {
	var applied uint64
	h := newHub(func() uint64 { return applied }, 0)
	h.logical = func(raw uint64) uint64 { return raw + 100 }
	s, err := h.subscribe(7, func() (uint64, error) { return 0, nil })
	if err != nil {
		t.Fatal(err)
	}
	applied = 10
	h.publish(10, fsm.Applied{Events: []fsm.Event{{Session: 7, Seq: 1, Kind: fsm.EventGranted}}})
	<-s.ready
	if got := s.take()[0]; got.Index != 110 {
		t.Fatalf("event index %d, want the logical 110", got.Index)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.waitLogical(ctx, 110); err != nil {
		t.Fatalf("waitLogical(110) at raw 10: %v", err)
	}
	if err := h.waitLogical(ctx, 111); err == nil {
		t.Fatal("waitLogical(111) returned at logical 110")
	}
	if err := h.waitApplied(ctx, 11); err == nil {
		t.Fatal("waitApplied(11) returned at raw 10")
	}
}

package server

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/raftnode"
)

// The error table of SPEC §9, and the errors of the cluster itself.
func TestErrorTable(t *testing.T) {
	for _, tc := range []struct {
		err    error
		code   codes.Code
		reason pb.ErrorReason
		name   string
	}{
		{&fsm.Error{Code: fsm.CodeNotSupported, Msg: `name "-x" is reserved`}, codes.InvalidArgument, pb.ErrorReason_NOT_SUPPORTED, "NotSupportedError"},
		{&fsm.Error{Code: fsm.CodeInvalid, Msg: "bad mode"}, codes.InvalidArgument, pb.ErrorReason_INVALID, "TypeError"},
		{&fsm.Error{Code: fsm.CodeSessionClosed, Msg: "session 3 is not open"}, codes.FailedPrecondition, pb.ErrorReason_SESSION_CLOSED, "InvalidStateError"},
		{&fsm.Error{Code: fsm.CodeLimit, Msg: "over"}, codes.ResourceExhausted, pb.ErrorReason_LIMIT, "QuotaExceededError"},
		{&fsm.Error{Code: fsm.CodePermission, Msg: "no"}, codes.PermissionDenied, pb.ErrorReason_PERMISSION, "SecurityError"},
		{fmt.Errorf("wrapped: %w", &fsm.Error{Code: fsm.CodeLimit, Msg: "over"}), codes.ResourceExhausted, pb.ErrorReason_LIMIT, "QuotaExceededError"},
		{&raftnode.NotLeaderError{LeaderID: "n1", LeaderAddr: "h:1"}, codes.Unavailable, pb.ErrorReason_NOT_LEADER, "NotLeader"},
		{raftnode.ErrShutdown, codes.Unavailable, pb.ErrorReason_SHUTTING_DOWN, "ShuttingDown"},
		{raftnode.ErrOutcomeUnknown, codes.Unavailable, pb.ErrorReason_OUTCOME_UNKNOWN, "OutcomeUnknown"},
		{context.DeadlineExceeded, codes.DeadlineExceeded, 0, ""},
		{errors.New("boom"), codes.Internal, 0, ""},
	} {
		st := status.Convert(toStatus(tc.err))
		if st.Code() != tc.code {
			t.Errorf("%v: code %s, want %s", tc.err, st.Code(), tc.code)
		}
		var info *errdetails.ErrorInfo
		for _, d := range st.Details() {
			if i, ok := d.(*errdetails.ErrorInfo); ok {
				info = i
			}
		}
		if tc.name == "" {
			if info != nil {
				t.Errorf("%v: unexpected ErrorInfo %v", tc.err, info)
			}
			continue
		}
		if info == nil || info.Reason != tc.reason.String() || info.Metadata["name"] != tc.name || info.Domain != ErrorDomain {
			t.Errorf("%v: ErrorInfo %v, want reason %s name %s", tc.err, info, tc.reason, tc.name)
		}
		if st.Message() == "" {
			t.Errorf("%v: empty message", tc.err)
		}
	}
	// A status from the leader a call was forwarded to passes unchanged.
	fwd := status.Error(codes.FailedPrecondition, "from the leader")
	if toStatus(fwd) != fwd {
		t.Error("a forwarded status was rewritten")
	}
}

func TestHubCutsOffSlowStreamsAndSkipsSyncedEvents(t *testing.T) {
	h := newHub(func() uint64 { return 0 }, 0)
	s, err := h.subscribe(7, func() (uint64, error) { return 2, nil })
	if err != nil {
		t.Fatal(err)
	}
	ev := func(seq uint64) fsm.Event { return fsm.Event{Session: 7, Seq: seq, Kind: fsm.EventGranted} }
	h.publish(10, fsm.Applied{Events: []fsm.Event{ev(1), ev(2), ev(3), {Session: 8, Seq: 1}}})
	<-s.ready
	if got := s.take()[0]; got.Seq != 3 || got.Index != 10 {
		t.Fatalf("first event %v: want seq 3 (1 and 2 are covered by the sync)", got)
	}
	for i := uint64(0); i <= subBuffer; i++ {
		h.publish(11+i, fsm.Applied{Events: []fsm.Event{ev(4 + i)}})
	}
	select {
	case <-s.gone:
	default:
		t.Fatal("a stream that does not read was not cut off")
	}
	// publish never blocked, and later events do not reach it.
	h.publish(100000, fsm.Applied{Events: []fsm.Event{ev(100000)}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.waitApplied(ctx, 100000); err != nil {
		t.Fatalf("applied index not recorded: %v", err)
	}
	if err := h.waitApplied(ctx, 100001); err == nil {
		t.Fatal("waitApplied returned for an index not yet applied")
	}
}

package rpcerr

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
		{&fsm.Error{Code: fsm.CodeNotHolder, Msg: "not the holder", Token: 7}, codes.FailedPrecondition, pb.ErrorReason_NOT_HOLDER, "InvalidStateError"},
		{fmt.Errorf("wrapped: %w", &fsm.Error{Code: fsm.CodeLimit, Msg: "over"}), codes.ResourceExhausted, pb.ErrorReason_LIMIT, "QuotaExceededError"},
		{&raftnode.NotLeaderError{LeaderID: "n1", LeaderAddr: "h:1"}, codes.Unavailable, pb.ErrorReason_NOT_LEADER, "NotLeader"},
		{fmt.Errorf("%w: node is starting", ErrNotReady), codes.Unavailable, pb.ErrorReason_NOT_READY, "NotReady"},
		{raftnode.ErrNotMember, codes.NotFound, pb.ErrorReason_NOT_MEMBER, "NotFoundError"},
		{raftnode.ErrDiverged, codes.Unavailable, pb.ErrorReason_REPLICA_DIVERGED, "ReplicaDiverged"},
		{raftnode.ErrShutdown, codes.Unavailable, pb.ErrorReason_SHUTTING_DOWN, "ShuttingDown"},
		{raftnode.ErrOutcomeUnknown, codes.Unavailable, pb.ErrorReason_OUTCOME_UNKNOWN, "OutcomeUnknown"},
		{context.DeadlineExceeded, codes.DeadlineExceeded, 0, ""},
		{errors.New("boom"), codes.Internal, 0, ""},
	} {
		st := status.Convert(Status(tc.err))
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
		if info == nil || info.Reason != tc.reason.String() || info.Metadata["name"] != tc.name || info.Domain != Domain {
			t.Errorf("%v: ErrorInfo %v, want reason %s name %s", tc.err, info, tc.reason, tc.name)
		}
		if st.Message() == "" {
			t.Errorf("%v: empty message", tc.err)
		}
	}
	// A status from the leader a call was forwarded to passes unchanged.
	fwd := status.Error(codes.FailedPrecondition, "from the leader")
	if Status(fwd) != fwd {
		t.Error("a forwarded status was rewritten")
	}
}

// The node's own refusals carry an ErrorInfo as the table's do.
func TestConstructorsCarryErrorInfo(t *testing.T) {
	for _, tc := range []struct {
		err    error
		code   codes.Code
		reason pb.ErrorReason
	}{
		{Invalid("bad"), codes.InvalidArgument, pb.ErrorReason_INVALID},
		{InvalidField("names", "bad"), codes.InvalidArgument, pb.ErrorReason_INVALID},
		{StreamBehind("behind"), codes.ResourceExhausted, pb.ErrorReason_LIMIT},
		{NoLeader("none"), codes.Unavailable, pb.ErrorReason_NOT_LEADER},
		{Unauthenticated("who"), codes.Unauthenticated, pb.ErrorReason_PERMISSION},
		{PermissionDenied("no"), codes.PermissionDenied, pb.ErrorReason_PERMISSION},
		{Compacted(5, "gone"), codes.OutOfRange, pb.ErrorReason_COMPACTED},
	} {
		st := status.Convert(tc.err)
		var info *errdetails.ErrorInfo
		for _, d := range st.Details() {
			if i, ok := d.(*errdetails.ErrorInfo); ok {
				info = i
			}
		}
		if st.Code() != tc.code || info == nil || info.Reason != tc.reason.String() || info.Domain != Domain {
			t.Errorf("%v: code %s info %v, want %s %s", tc.err, st.Code(), info, tc.code, tc.reason)
		}
	}
}

// A record write refused NOT_HOLDER names the name's current token, and a
// COMPACTED refusal the oldest index to resume from.
func TestMetadataOfNotHolderAndCompacted(t *testing.T) {
	meta := func(err error) map[string]string {
		for _, d := range status.Convert(err).Details() {
			if i, ok := d.(*errdetails.ErrorInfo); ok {
				return i.Metadata
			}
		}
		return nil
	}
	if m := meta(Status(&fsm.Error{Code: fsm.CodeNotHolder, Msg: "x", Token: 42})); m["current_token"] != "42" {
		t.Errorf("NOT_HOLDER metadata %v, want current_token 42", m)
	}
	if m := meta(Status(&fsm.Error{Code: fsm.CodeNotHolder, Msg: "x"})); m["current_token"] != "0" {
		t.Errorf("NOT_HOLDER metadata %v, want current_token 0", m)
	}
	if m := meta(Compacted(99, "gone")); m["oldest_index"] != "99" {
		t.Errorf("COMPACTED metadata %v, want oldest_index 99", m)
	}
}

// A group that does not serve a namespace's slot (fsm CodeMoving,
// CodeMoved) answers a retryable Unavailable, NOT_READY, never a
// FailedPrecondition, which would end the client's session (groups.md
// §3.1); the metadata says which slot and that it is moving or moved.
func TestSlotRefusals(t *testing.T) {
	info := func(err error) (codes.Code, *errdetails.ErrorInfo) {
		st := status.Convert(Status(err))
		for _, d := range st.Details() {
			if i, ok := d.(*errdetails.ErrorInfo); ok {
				return st.Code(), i
			}
		}
		return st.Code(), nil
	}
	// A group ≥ 1 owns no slot until an Import: its refusal is CodeMoving
	// with the slot and no target.
	moving := fsm.NewGroup(1).Owns("ns")
	if moving == nil || moving.Code != fsm.CodeMoving {
		t.Fatalf("NewGroup(1).Owns = %v, want CodeMoving", moving)
	}
	code, i := info(fmt.Errorf("wrapped: %w", moving))
	if code != codes.Unavailable || i == nil || i.Reason != pb.ErrorReason_NOT_READY.String() || i.Domain != Domain {
		t.Fatalf("moving: %s %v, want Unavailable NOT_READY", code, i)
	}
	want := map[string]string{"name": "NotReady", "moving": "true", "slot": fmt.Sprint(fsm.Slot("ns"))}
	if fmt.Sprint(i.Metadata) != fmt.Sprint(want) {
		t.Errorf("moving metadata %v, want %v", i.Metadata, want)
	}
	// CodeMoved without a slot (none can be built outside fsm before
	// phase 2) still says "moved".
	code, i = info(&fsm.Error{Code: fsm.CodeMoved, Msg: "moved to group 2"})
	if code != codes.Unavailable || i == nil || i.Reason != pb.ErrorReason_NOT_READY.String() {
		t.Fatalf("moved: %s %v, want Unavailable NOT_READY", code, i)
	}
	if want := map[string]string{"name": "NotReady", "moved": "true"}; fmt.Sprint(i.Metadata) != fmt.Sprint(want) {
		t.Errorf("moved metadata %v, want %v", i.Metadata, want)
	}
	if st := status.Convert(Status(moving)); st.Message() != moving.Msg {
		t.Errorf("message %q, want fsm's %q", st.Message(), moving.Msg)
	}
}

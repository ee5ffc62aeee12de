package server

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/raftnode"
)

// ErrorDomain is the ErrorInfo domain of every error of this service.
const ErrorDomain = "lockcluster.v1"

// The one table from the project's errors to gRPC (SPEC §9).
var fsmCodes = map[fsm.Code]struct {
	code   codes.Code
	reason pb.ErrorReason
	name   string // the Web Locks (DOMException) name
}{
	fsm.CodeInvalid:       {codes.InvalidArgument, pb.ErrorReason_INVALID, "TypeError"},
	fsm.CodeNotSupported:  {codes.InvalidArgument, pb.ErrorReason_NOT_SUPPORTED, "NotSupportedError"},
	fsm.CodeSessionClosed: {codes.FailedPrecondition, pb.ErrorReason_SESSION_CLOSED, "InvalidStateError"},
	fsm.CodeLimit:         {codes.ResourceExhausted, pb.ErrorReason_LIMIT, "QuotaExceededError"},
	fsm.CodePermission:    {codes.PermissionDenied, pb.ErrorReason_PERMISSION, "SecurityError"},
}

func withInfo(code codes.Code, reason pb.ErrorReason, name, msg string, meta map[string]string) error {
	st := status.New(code, msg)
	md := map[string]string{"name": name}
	for k, v := range meta {
		md[k] = v
	}
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason.String(), Domain: ErrorDomain, Metadata: md}); err == nil {
		st = d
	}
	return st.Err()
}

// toStatus maps any error of this node to a gRPC status error. A status
// error (for example one returned by the leader we forwarded to) passes
// through unchanged.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var fe *fsm.Error
	if errors.As(err, &fe) {
		if m, ok := fsmCodes[fe.Code]; ok {
			return withInfo(m.code, m.reason, m.name, fe.Msg, nil)
		}
	}
	var nl *raftnode.NotLeaderError
	switch {
	case errors.As(err, &nl):
		return withInfo(codes.Unavailable, pb.ErrorReason_NOT_LEADER, "NotLeader", "this node is not the leader and could not forward: "+err.Error(), map[string]string{"leader": nl.LeaderAddr})
	case errors.Is(err, raftnode.ErrNotMember):
		return withInfo(codes.NotFound, pb.ErrorReason_NOT_MEMBER, "NotFoundError", err.Error(), nil)
	case errors.Is(err, raftnode.ErrDiverged):
		return withInfo(codes.Unavailable, pb.ErrorReason_REPLICA_DIVERGED, "ReplicaDiverged", err.Error(), nil)
	case errors.Is(err, raftnode.ErrShutdown):
		return withInfo(codes.Unavailable, pb.ErrorReason_SHUTTING_DOWN, "ShuttingDown", err.Error(), nil)
	case errors.Is(err, raftnode.ErrOutcomeUnknown), errors.Is(err, raftnode.ErrNotApplied):
		return withInfo(codes.Unavailable, pb.ErrorReason_OUTCOME_UNKNOWN, "OutcomeUnknown", err.Error()+" (retry with the same request id)", nil)
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// invalid is a TypeError about an RPC's own fields.
func invalid(msg string) error {
	return withInfo(codes.InvalidArgument, pb.ErrorReason_INVALID, "TypeError", msg, nil)
}

// invalidField is a TypeError about one field of an RPC's message, named in
// the ErrorInfo's metadata ("field") when field is not "".
func invalidField(field, msg string) error {
	if field == "" {
		return invalid(msg)
	}
	return withInfo(codes.InvalidArgument, pb.ErrorReason_INVALID, "TypeError", msg, map[string]string{"field": field})
}

// Package rpcerr is the one table from lockcluster's errors to gRPC
// statuses (SPEC §9): every error a node answers with goes through it, so
// every status carries a google.rpc.ErrorInfo whose reason is a
// lockclusterv1.ErrorReason name and whose metadata names the Web Locks
// error. fsm codes, raftnode's sentinels and the node's own conditions
// (starting, behind the client, a stream cut, refused credentials) are
// mapped here and nowhere else.
//
// It is implementation, with no compatibility promise; the contract is the
// wire (api/lockclusterv1).
package rpcerr

import (
	"context"
	"errors"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/raftnode"
)

// Domain is the ErrorInfo domain of every error of this service.
const Domain = "lockcluster.v1"

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
	// A record write by a session that no longer (or never) held the name
	// exclusively with its token: the metadata names the name's current
	// token ("current_token", "0": nobody holds it exclusively).
	fsm.CodeNotHolder: {codes.FailedPrecondition, pb.ErrorReason_NOT_HOLDER, "InvalidStateError"},
}

// New is a status of code with an ErrorInfo of reason, the Web Locks
// error name and extra metadata.
func New(code codes.Code, reason pb.ErrorReason, name, msg string, meta map[string]string) error {
	st := status.New(code, msg)
	md := map[string]string{"name": name}
	for k, v := range meta {
		md[k] = v
	}
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason.String(), Domain: Domain, Metadata: md}); err == nil {
		st = d
	}
	return st.Err()
}

// WithRetryDelay adds a google.rpc.RetryInfo to a status error: the
// client should wait delay before it tries again (a node shedding load
// spreads its clients' return). Other errors pass through unchanged.
func WithRetryDelay(err error, delay time.Duration) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	if d, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)}); derr == nil {
		return d.Err()
	}
	return err
}

// Status maps any error of this node to a gRPC status error. A status
// error (for example one returned by the leader a call was forwarded to)
// passes through unchanged.
func Status(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var fe *fsm.Error
	if errors.As(err, &fe) {
		if m, ok := fsmCodes[fe.Code]; ok {
			var meta map[string]string
			if fe.Code == fsm.CodeNotHolder {
				meta = map[string]string{"current_token": strconv.FormatUint(fe.Token, 10)}
			}
			return New(m.code, m.reason, m.name, fe.Msg, meta)
		}
		if fe.Code == fsm.CodeMoving || fe.Code == fsm.CodeMoved {
			return slotRefusal(fe)
		}
	}
	var nl *raftnode.NotLeaderError
	switch {
	case errors.As(err, &nl):
		return New(codes.Unavailable, pb.ErrorReason_NOT_LEADER, "NotLeader", "this node is not the leader and could not forward: "+err.Error(), map[string]string{"leader": nl.LeaderAddr})
	case errors.Is(err, raftnode.ErrNotMember):
		return New(codes.NotFound, pb.ErrorReason_NOT_MEMBER, "NotFoundError", err.Error(), nil)
	case errors.Is(err, raftnode.ErrDiverged):
		return New(codes.Unavailable, pb.ErrorReason_REPLICA_DIVERGED, "ReplicaDiverged", err.Error(), nil)
	case errors.Is(err, raftnode.ErrDamaged), errors.Is(err, raftnode.ErrStorage), errors.Is(err, raftnode.ErrBehind):
		return New(codes.Unavailable, pb.ErrorReason_NOT_READY, "NotReady", err.Error()+": try another node", nil)
	case errors.Is(err, ErrNotReady):
		return New(codes.Unavailable, pb.ErrorReason_NOT_READY, "NotReady", err.Error()+": try another node", nil)
	case errors.Is(err, raftnode.ErrShutdown):
		return New(codes.Unavailable, pb.ErrorReason_SHUTTING_DOWN, "ShuttingDown", err.Error(), nil)
	case errors.Is(err, raftnode.ErrOutcomeUnknown), errors.Is(err, raftnode.ErrNotApplied):
		return New(codes.Unavailable, pb.ErrorReason_OUTCOME_UNKNOWN, "OutcomeUnknown", err.Error()+" (retry with the same request id)", nil)
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// slotRefusal maps fsm's CodeMoving and CodeMoved (groups.md §6.3: this
// group does not serve the namespace's slot) to Unavailable, NOT_READY,
// so that a client of today retries elsewhere or later and never ends
// its session: "session closed" (FailedPrecondition) would (groups.md
// §3.1). The metadata says which slot ("slot") and, when known, where
// it moves or moved to ("to", "epoch"), and "moving" or "moved": "true".
// Phase 3 adds MOVING and MOVED to lockclusterv1.ErrorReason and maps
// these codes to them; until then the wire (and the proto) is unchanged,
// and with one group neither code is ever given (groups.md I4).
func slotRefusal(fe *fsm.Error) error {
	meta := map[string]string{}
	if fe.Code == fsm.CodeMoved {
		meta["moved"] = "true"
	} else {
		meta["moving"] = "true"
	}
	if si, ok := fe.Slot(); ok {
		meta["slot"] = strconv.FormatUint(uint64(si.Slot), 10)
		if si.Known {
			meta["to"] = strconv.FormatUint(uint64(si.To), 10)
			meta["epoch"] = strconv.FormatUint(uint64(si.Epoch), 10)
		}
	}
	return New(codes.Unavailable, pb.ErrorReason_NOT_READY, "NotReady", fe.Msg, meta)
}

// Invalid is a TypeError about an RPC's own fields.
func Invalid(msg string) error {
	return New(codes.InvalidArgument, pb.ErrorReason_INVALID, "TypeError", msg, nil)
}

// InvalidField is a TypeError about one field of an RPC's message, named in
// the ErrorInfo's metadata ("field") when field is not "".
func InvalidField(field, msg string) error {
	if field == "" {
		return Invalid(msg)
	}
	return New(codes.InvalidArgument, pb.ErrorReason_INVALID, "TypeError", msg, map[string]string{"field": field})
}

// ErrNotReady: this node cannot serve the call yet; it is starting, or it
// has not applied what the client has already seen. Wrap it to say which.
var ErrNotReady = errors.New("this node is not ready")

// StreamBehind cuts a session stream whose backlog outgrew its cap: the
// client reconnects and resynchronises.
func StreamBehind(msg string) error {
	return New(codes.ResourceExhausted, pb.ErrorReason_LIMIT, "QuotaExceededError", msg, nil)
}

// Compacted refuses a watch that asked to resume below the oldest index
// of the history a node keeps, or that fell behind it (msg says which):
// OutOfRange, COMPACTED, naming the oldest index it can resume from
// ("oldest_index"). The client resynchronises from a snapshot.
func Compacted(oldest uint64, msg string) error {
	return New(codes.OutOfRange, pb.ErrorReason_COMPACTED, "Compacted", msg, map[string]string{"oldest_index": strconv.FormatUint(oldest, 10)})
}

// NoLeader ends a session stream on a node that knows no leader to renew
// the session through: the client moves to another node.
func NoLeader(msg string) error {
	return New(codes.Unavailable, pb.ErrorReason_NOT_LEADER, "NotLeader", msg, nil)
}

// Unauthenticated refuses a call that carries no credential.
func Unauthenticated(msg string) error {
	return New(codes.Unauthenticated, pb.ErrorReason_PERMISSION, "SecurityError", msg, nil)
}

// PermissionDenied refuses a credential that does not grant the call.
func PermissionDenied(msg string) error {
	return New(codes.PermissionDenied, pb.ErrorReason_PERMISSION, "SecurityError", msg, nil)
}

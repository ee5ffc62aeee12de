package lockcluster

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// The errors of SPEC §9. Test them with errors.Is: every error the client
// returns for a class matches its sentinel.
var (
	// ErrNotSupported is NotSupportedError: a reserved name (starting with
	// "-") or a forbidden option combination (steal with ifAvailable or
	// with shared mode).
	ErrNotSupported = errors.New("lockcluster: NotSupportedError")
	// ErrAborted is AbortError: the request was aborted (its context ended,
	// its session ended) or the lock was stolen. The cause is wrapped too:
	// errors.Is(err, context.DeadlineExceeded), errors.Is(err, ErrStolen).
	ErrAborted = errors.New("lockcluster: AbortError")
	// ErrPermission is SecurityError: the credentials do not grant the
	// namespace.
	ErrPermission = errors.New("lockcluster: SecurityError")
	// ErrSessionClosed is InvalidStateError: the session is closed or
	// expired.
	ErrSessionClosed = errors.New("lockcluster: InvalidStateError: session closed")
	// ErrInvalid is TypeError: bad UTF-8, a bad mode, a malformed request.
	ErrInvalid = errors.New("lockcluster: TypeError")
	// ErrLimit: over a limit of the cluster (name length, scope size,
	// requests per session...).
	ErrLimit = errors.New("lockcluster: limit exceeded")
	// ErrUnavailable: no endpoint could serve the call before the context
	// ended.
	ErrUnavailable = errors.New("lockcluster: unavailable")
	// ErrTLSMismatch: the client and the endpoints disagree on TLS (a
	// plaintext client meets a TLS node, or a TLS client a plaintext one),
	// so no endpoint can serve the call. Dial and the calls of a client
	// never served yet fail with it at once instead of at their deadline;
	// the error names the endpoint and the fix. It matches ErrUnavailable
	// too.
	ErrTLSMismatch = errors.New("lockcluster: TLS mismatch")
	// ErrNotHolder: a record write (Lock.SetRecord, DeleteRecord,
	// ReleaseWithRecord) by a lock that no longer holds its name
	// exclusively with its token (stolen, expired, released), or by a
	// shared lock. Nothing changed. The error names the name's current
	// token (Error.CurrentToken; 0: nobody holds it exclusively).
	ErrNotHolder = errors.New("lockcluster: not the holder")
	// ErrCompacted: a watch asked to resume from an index older than the
	// history the node keeps (Error.OldestIndex names the oldest it can
	// resume from). A Watcher never returns it: it resynchronises from a
	// snapshot, which it yields marked Resync.
	ErrCompacted = errors.New("lockcluster: compacted")
	// ErrOutcomeUnknown: a write whose outcome the client cannot tell. An
	// attempt's answer was lost (the node it went through failed, or
	// timed out) after the cluster may have applied it, and a later
	// attempt was refused for a reason that came after (the lock was lost
	// meanwhile: a record write then fails with this, not with
	// ErrNotHolder, since the first attempt may have written it). Read
	// the record (Client.Record) to learn what is there.
	ErrOutcomeUnknown = errors.New("lockcluster: outcome unknown")
)

// mayHaveApplied reports whether a write attempt that failed with err may
// still have been applied: only a refusal the cluster makes before it
// proposes the entry (a malformed or forbidden call, a node that is not
// the leader or not ready) says it was not; a lost answer (a broken
// connection, a timeout, OUTCOME_UNKNOWN) says nothing.
func mayHaveApplied(err error) bool {
	if err == nil {
		return false
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated, codes.ResourceExhausted,
		codes.FailedPrecondition, codes.Unimplemented, codes.NotFound, codes.AlreadyExists, codes.OutOfRange:
		return false
	case codes.Unavailable:
		var e *Error
		if errors.As(fromStatus(err), &e) {
			switch e.Reason {
			case pb.ErrorReason_NOT_LEADER, pb.ErrorReason_NOT_READY, pb.ErrorReason_REPLICA_DIVERGED:
				return false
			}
		}
	}
	return true
}

// mismatchError is an ErrTLSMismatch, which is also an ErrUnavailable.
type mismatchError struct{ msg string }

func (e *mismatchError) Error() string { return e.msg }

// Is matches ErrTLSMismatch and ErrUnavailable.
func (e *mismatchError) Is(target error) bool {
	return target == ErrTLSMismatch || target == ErrUnavailable
}

// Causes of a lost lock (the cause of its context) or of an abort.
//
// ErrStolen and ErrSessionLost are AbortErrors: errors.Is(err, ErrAborted)
// holds for both, as the spec rejects the old holder's released promise
// with an AbortError when its lock is stolen or its agent ends.
var (
	// ErrStolen: another request took the lock with Steal. It matches
	// ErrAborted.
	ErrStolen error = &abortCause{"lockcluster: AbortError: lock stolen"}
	// ErrSessionLost: the session ended (expired, closed) or the client
	// went a whole TTL without an acknowledged heartbeat (jeopardy). It
	// matches ErrAborted.
	ErrSessionLost error = &abortCause{"lockcluster: AbortError: session lost"}
	// ErrReleased: the lock was released by its holder.
	ErrReleased = errors.New("lockcluster: lock released")
)

// abortCause is a cause that is itself an AbortError.
type abortCause struct{ msg string }

func (e *abortCause) Error() string { return e.msg }

// Is makes the cause match ErrAborted.
func (e *abortCause) Is(target error) bool { return target == ErrAborted }

// Error is an error answered by the cluster: the Web Locks error name, the
// gRPC code and the server's message. It matches one of the sentinels.
type Error struct {
	Name    string // NotSupportedError, TypeError, AbortError, ...
	Code    codes.Code
	Reason  pb.ErrorReason
	Message string
	// Metadata is the ErrorInfo's metadata (the server's details, such as
	// "current_token" of NOT_HOLDER or "oldest_index" of COMPACTED).
	Metadata map[string]string
}

// CurrentToken is, for an ErrNotHolder, the token of the name's current
// exclusive holder (0: none); 0 for other errors.
func (e *Error) CurrentToken() uint64 { return e.metaUint("current_token") }

// OldestIndex is, for an ErrCompacted, the oldest index the node can
// resume a watch from; 0 for other errors.
func (e *Error) OldestIndex() uint64 { return e.metaUint("oldest_index") }

func (e *Error) metaUint(key string) uint64 {
	if e == nil {
		return 0
	}
	n, _ := strconv.ParseUint(e.Metadata[key], 10, 64)
	return n
}

func (e *Error) Error() string {
	if e.Code == codes.Unauthenticated && e.Name != e.Code.String() {
		// No credential at all, rather than one refused: say so.
		return "lockcluster: " + e.Name + " (" + e.Code.String() + "): " + e.Message
	}
	if e.Reason == pb.ErrorReason_NOT_HOLDER {
		if t, ok := e.Metadata["current_token"]; ok && !strings.Contains(e.Message, "current token") {
			return "lockcluster: " + e.Name + ": " + e.Message + " (current token " + t + ")"
		}
	}
	return "lockcluster: " + e.Name + ": " + e.Message
}

// Is matches the sentinel of the error's class.
func (e *Error) Is(target error) bool {
	switch e.Reason {
	case pb.ErrorReason_NOT_SUPPORTED, pb.ErrorReason_CLUSTER_LEVEL:
		// CLUSTER_LEVEL: a feature a member of the cluster does not run yet
		// (records, semaphores, watch during a rolling upgrade). The
		// server names it NotSupportedError; the message says which
		// level is needed.
		return target == ErrNotSupported
	case pb.ErrorReason_INVALID:
		return target == ErrInvalid
	case pb.ErrorReason_ABORTED:
		return target == ErrAborted
	case pb.ErrorReason_PERMISSION:
		return target == ErrPermission
	case pb.ErrorReason_SESSION_CLOSED:
		return target == ErrSessionClosed
	case pb.ErrorReason_LIMIT:
		return target == ErrLimit
	case pb.ErrorReason_NOT_HOLDER:
		return target == ErrNotHolder
	case pb.ErrorReason_COMPACTED:
		return target == ErrCompacted
	case pb.ErrorReason_OUTCOME_UNKNOWN:
		return target == ErrUnavailable || target == ErrOutcomeUnknown
	case pb.ErrorReason_NOT_LEADER, pb.ErrorReason_SHUTTING_DOWN, pb.ErrorReason_NOT_READY, pb.ErrorReason_REPLICA_DIVERGED:
		return target == ErrUnavailable
	}
	switch e.Code {
	case codes.PermissionDenied, codes.Unauthenticated:
		return target == ErrPermission
	case codes.Unavailable:
		return target == ErrUnavailable
	}
	return false
}

// fromStatus turns a gRPC error into an *Error when the server said what
// kind it is; other errors pass through.
func fromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok || err == nil {
		return err
	}
	e := &Error{Code: st.Code(), Message: st.Message(), Name: st.Code().String()}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			e.Reason = pb.ErrorReason(pb.ErrorReason_value[info.Reason])
			e.Metadata = info.Metadata
			if n := info.Metadata["name"]; n != "" {
				e.Name = n
			}
		}
	}
	if e.Reason == pb.ErrorReason_ERROR_REASON_UNSPECIFIED {
		switch st.Code() {
		case codes.Canceled, codes.DeadlineExceeded:
			return err
		}
	}
	return e
}

// retryable says whether a call may be sent again (to another endpoint):
// the cluster did not serve it and a retry is safe (writes carry request
// ids, so a retry never applies twice).
func retryable(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	return st.Code() == codes.Unavailable
}

// retryDelay returns the delay a status error's RetryInfo asks for (a
// node shedding attaches, or ending every stream at once, spreads its
// clients' return with it).
func retryDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.RetryDelay != nil {
			return ri.RetryDelay.AsDuration(), true
		}
	}
	return 0, false
}

// slotMoving reports whether err ended a call or stream because the
// namespace's slot is moving between the cluster's Raft groups (MOVING or
// MOVED: the server's metadata says so): not a failure of the node, so
// the client stays on it and comes back quickly.
func slotMoving(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.Metadata["moving"] == "true" || info.Metadata["moved"] == "true"
		}
	}
	return false
}

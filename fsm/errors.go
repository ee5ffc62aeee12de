package fsm

import (
	"errors"
	"fmt"
)

// Code classifies an error as SPEC §9 does; the api package maps each code to
// one gRPC status and Web Locks error name.
type Code uint8

const (
	codeOK Code = iota
	// CodeInvalid is the spec's TypeError: bad UTF-8, an unknown mode, a
	// malformed request.
	CodeInvalid
	// CodeNotSupported is NotSupportedError: a reserved name or an option
	// combination the spec forbids.
	CodeNotSupported
	// CodeSessionClosed is InvalidStateError: the session is not open (in
	// this namespace).
	CodeSessionClosed
	// CodeLimit: over a configured limit.
	CodeLimit
	// CodePermission is SecurityError.
	CodePermission
	// CodeNotHolder: a record write by a session that does not hold the
	// name exclusively with the token it gave; Error.Token is the name's
	// current exclusive token (0: none).
	CodeNotHolder
	// CodeMoving: this group does not serve the namespace's slot now: it
	// is moving out (frozen), or the group never owned it (absent);
	// Error.Slot says which and where to (groups.go). Nothing changed;
	// the same call may be retried, at this group or the slot's owner.
	// Never given by group 0 before a move (groups.md I4).
	CodeMoving
	// CodeMoved: the namespace's slot moved to another group
	// (Error.Slot); the call goes there.
	CodeMoved
)

var codeNames = [...]string{"OK", "TypeError", "NotSupportedError", "InvalidStateError", "LimitExceeded", "SecurityError", "NotHolderError", "MovingError", "MovedError"}

func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("code(%d)", uint8(c))
}

// Error is a rejected entry's error: a code and a message that names the bad
// value. errors.Is(err, errInvalid) and friends compare codes.
type Error struct {
	Code Code
	Msg  string
	// Token: with CodeNotHolder, the name's current exclusive token (0:
	// nobody holds it exclusively).
	Token uint64
	// slot: with CodeMoving and CodeMoved, where the namespace's slot is
	// (Slot). Unexported, so that an Error of the codes before reads as
	// it did.
	slot *SlotInfo
}

// Slot says, for a CodeMoving or CodeMoved refusal, which slot the
// namespace is on and where it moves or moved to; ok is false for the
// other codes.
func (e *Error) Slot() (SlotInfo, bool) {
	if e == nil || e.slot == nil {
		return SlotInfo{}, false
	}
	return *e.slot, true
}

func (e *Error) Error() string { return e.Msg }

// Is reports whether target is an *Error with the same code, so the
// sentinels below match every error of their class.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// The sentinels, one per code, for errors.Is.
var (
	errInvalid       = &Error{Code: CodeInvalid, Msg: "invalid argument"}
	errNotSupported  = &Error{Code: CodeNotSupported, Msg: "not supported"}
	errSessionClosed = &Error{Code: CodeSessionClosed, Msg: "session closed"}
	errLimit         = &Error{Code: CodeLimit, Msg: "limit exceeded"}
	errPermission    = &Error{Code: CodePermission, Msg: "permission denied"}
	errMoving        = &Error{Code: CodeMoving, Msg: "moving"}
	errMoved         = &Error{Code: CodeMoved, Msg: "moved"}
)

func errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// codeOf returns the code of err, codeOK for nil, and CodeInvalid for an
// error that is not an *Error.
func codeOf(err error) Code {
	if err == nil {
		return codeOK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInvalid
}

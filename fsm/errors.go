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
)

var codeNames = [...]string{"OK", "TypeError", "NotSupportedError", "InvalidStateError", "LimitExceeded", "SecurityError", "NotHolderError"}

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

package placement

import (
	"fmt"
	"strconv"
	"strings"
)

// Code classifies a refusal: why Apply changed nothing.
type Code uint8

const (
	codeOK Code = iota
	// CodeInvalid: the command is malformed whatever the state: an empty
	// or unordered slot set, a slot ≥ fsm.Slots, a bad node id list, an
	// unknown phase or group state, a FreezeL where none belongs, an
	// index that is not after the last one applied.
	CodeInvalid
	// CodeGroupID: a group id that cannot be created or changed here:
	// group 0 (built in), 65535 (reserved), an id that is not the next
	// one, an existing group with other members.
	CodeGroupID
	// CodeUnknownGroup: a group that does not exist.
	CodeUnknownGroup
	// CodeGroupState: a group in a state that forbids the command (a
	// move to a group that is not serving), or a state change that is
	// not one of creating→serving, serving→draining, draining→serving.
	CodeGroupState
	// CodeWrongGroup: a slot that is not in the move's From group.
	CodeWrongGroup
	// CodeEpoch: a move's epoch that is not above a slot's epoch.
	CodeEpoch
	// CodeMoveInProgress: a slot that already has a move in progress.
	CodeMoveInProgress
	// CodeNoMove: no move of exactly these slots at this epoch.
	CodeNoMove
	// CodePhase: a phase that does not follow the move's (phases only go
	// forward, one at a time), a move already aborted, or a FreezeL that
	// differs from the one recorded.
	CodePhase
	// CodeNoAbort: an abort of a move that has reached imported: it is
	// finished forward (groups.md §12.4).
	CodeNoAbort
	numCodes
)

var codeNames = [...]string{"OK", "Invalid", "GroupID", "UnknownGroup", "GroupState", "WrongGroup", "Epoch", "MoveInProgress", "NoMove", "Phase", "NoAbort"}

func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "Code(" + strconv.Itoa(int(c)) + ")"
}

// Error is a refusal: a code and a message that names the bad value.
// errors.Is(err, &Error{Code: c}) matches every refusal of code c.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return "placement: " + e.Msg }

// Is reports whether target is an *Error of the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

func refuse(c Code, format string, args ...any) *Error {
	return &Error{Code: c, Msg: fmt.Sprintf(format, args...)}
}

// fmtSlots prints a slot set for a message, shortened past 8 slots so
// that a move of every slot does not make a 20 KiB message.
func fmtSlots(slots []uint16) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, s := range slots {
		if i == 6 && len(slots) > 8 {
			b.WriteString(" … ")
			b.WriteString(strconv.Itoa(int(slots[len(slots)-1])))
			b.WriteString("] (" + strconv.Itoa(len(slots)) + " slots)")
			return b.String()
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(int(s)))
	}
	b.WriteByte(']')
	return b.String()
}

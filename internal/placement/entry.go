package placement

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// EntryType numbers the directory's log entries. Numbers are explicit and
// never reused. They are 32 and up, so that the type byte, which is the
// first byte of a directory entry, never equals the first byte of an fsm
// entry (fsm's envelope version, 1 or 2): IsEntry routes on it.
type EntryType uint8

const (
	// FirstType is the lowest directory entry type: every entry whose
	// first byte is FirstType or above is the directory's (IsEntry).
	FirstType EntryType = 32

	TypeCreateGroup     EntryType = 32 // DirCreateGroup
	TypeMoveBegin       EntryType = 33 // DirMoveBegin
	TypeMovePhase       EntryType = 34 // DirMovePhase
	TypeMoveAbort       EntryType = 35 // DirMoveAbort
	TypeSetGroupMembers EntryType = 36 // DirSetGroupMembers
	// TypeSetGroupState is not in groups.md §9's list: the design gives
	// groups three states and no entry that changes them (DESIGN.md).
	TypeSetGroupState EntryType = 37 // DirSetGroupState
)

var typeNames = map[EntryType]string{
	TypeCreateGroup: "DirCreateGroup", TypeMoveBegin: "DirMoveBegin", TypeMovePhase: "DirMovePhase",
	TypeMoveAbort: "DirMoveAbort", TypeSetGroupMembers: "DirSetGroupMembers", TypeSetGroupState: "DirSetGroupState",
}

func (t EntryType) String() string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return "EntryType(" + strconv.Itoa(int(t)) + ")"
}

// Command is one directory entry: one of the Dir* types.
type Command interface{ Type() EntryType }

// DirCreateGroup creates group Group, which must be the next group id
// (NextGroup), in state creating, with its first members. Repeated with
// the same members it is a no-op; group 0 exists from the start and is
// never created.
type DirCreateGroup struct {
	Group     uint16
	Voters    []string // node ids, strictly ascending, at least one
	Nonvoters []string // node ids, strictly ascending, none a voter
}

// DirMoveBegin begins moving Slots from group From to group To at Epoch
// (groups.md §12.1 step 0): every slot must be in From at an epoch below
// Epoch with no move in progress, and To must be serving. Repeated, it is
// a no-op.
type DirMoveBegin struct {
	Slots    []uint16 // strictly ascending, each < fsm.Slots
	From, To uint16
	Epoch    uint32
}

// DirMovePhase records that the move of exactly Slots at Epoch reached
// Phase, the one after its current phase (frozen, imported, flipped,
// dropped). FreezeL, the logical index of the source's Freeze, comes
// with frozen only (0 otherwise). The flip routes the slots to the
// move's target at its epoch. A phase the move already passed is a no-op.
type DirMovePhase struct {
	Slots   []uint16
	Epoch   uint32
	Phase   Phase
	FreezeL uint64
}

// DirMoveAbort records that the move of exactly Slots at Epoch was
// aborted (the target's Reject, then the source's Unfreeze, committed):
// only before imported. The slots stay with the source, at Epoch (as the
// source's Unfreeze leaves them owned at Epoch). Repeated, a no-op.
type DirMoveAbort struct {
	Slots []uint16
	Epoch uint32
}

// DirSetGroupMembers replaces the members of group Group (not 0, whose
// membership is its raft configuration). Repeated, a no-op.
type DirSetGroupMembers struct {
	Group     uint16
	Voters    []string
	Nonvoters []string
}

// DirSetGroupState changes group Group's state: creating → serving (the
// mover saw its first leader apply SetGroup), serving → draining (no new
// move into it), draining → serving. Group 0 is always serving.
// Repeated, a no-op.
type DirSetGroupState struct {
	Group uint16
	State GroupState
}

func (DirCreateGroup) Type() EntryType     { return TypeCreateGroup }
func (DirMoveBegin) Type() EntryType       { return TypeMoveBegin }
func (DirMovePhase) Type() EntryType       { return TypeMovePhase }
func (DirMoveAbort) Type() EntryType       { return TypeMoveAbort }
func (DirSetGroupMembers) Type() EntryType { return TypeSetGroupMembers }
func (DirSetGroupState) Type() EntryType   { return TypeSetGroupState }

// IsEntry reports whether a log entry is the directory's (its first byte
// is FirstType or above) rather than fsm's: group 0's raft adapter routes
// on it before decoding. An entry of a type this build does not know is
// still the directory's, and DecodeEntry refuses it.
func IsEntry(data []byte) bool { return len(data) > 0 && EntryType(data[0]) >= FirstType }

// The entry format:
//
//	byte     entry type (EntryType, 32 and up)
//	...      the command's fields, in the order of EncodeEntry: uvarints,
//	         and lists as a uvarint count then their items (a string is a
//	         uvarint length then its bytes)
//
// An entry must be consumed exactly: trailing bytes are an error. There is
// no flags byte and no ignore-if-unknown: an old node that skipped a
// directory entry would route differently from the others. A new field
// means a new entry type.

// EncodeEntry returns the bytes of cmd. It encodes any command it knows,
// well formed or not (Apply refuses the malformed ones); it fails only on
// a command type it does not know.
func EncodeEntry(cmd Command) ([]byte, error) {
	en := encoder{}
	switch c := cmd.(type) {
	case *DirCreateGroup:
		en.byte1(byte(TypeCreateGroup))
		en.uvarint(uint64(c.Group))
		en.strs(c.Voters)
		en.strs(c.Nonvoters)
	case *DirMoveBegin:
		en.byte1(byte(TypeMoveBegin))
		en.slots(c.Slots)
		en.uvarint(uint64(c.From))
		en.uvarint(uint64(c.To))
		en.uvarint(uint64(c.Epoch))
	case *DirMovePhase:
		en.byte1(byte(TypeMovePhase))
		en.slots(c.Slots)
		en.uvarint(uint64(c.Epoch))
		en.uvarint(uint64(c.Phase))
		en.uvarint(c.FreezeL)
	case *DirMoveAbort:
		en.byte1(byte(TypeMoveAbort))
		en.slots(c.Slots)
		en.uvarint(uint64(c.Epoch))
	case *DirSetGroupMembers:
		en.byte1(byte(TypeSetGroupMembers))
		en.uvarint(uint64(c.Group))
		en.strs(c.Voters)
		en.strs(c.Nonvoters)
	case *DirSetGroupState:
		en.byte1(byte(TypeSetGroupState))
		en.uvarint(uint64(c.Group))
		en.uvarint(uint64(c.State))
	default:
		return nil, fmt.Errorf("placement: cannot encode command %T", cmd)
	}
	return en.b, nil
}

// DecodeEntry decodes an entry. Its error names what is wrong: an empty
// entry, a type below FirstType or unknown to this build, a truncated
// field, a value that does not fit its field, trailing bytes. A replica
// that cannot decode a committed entry must stop. The values are not
// checked here but by Apply, which refuses a malformed command and
// changes nothing: a mover's bad proposal must not stop group 0.
func DecodeEntry(b []byte) (Command, error) {
	if len(b) == 0 {
		return nil, errors.New("placement: empty entry")
	}
	t := EntryType(b[0])
	d := decoder{b: b[1:]}
	var cmd Command
	switch t {
	case TypeCreateGroup:
		c := &DirCreateGroup{Group: d.u16()}
		c.Voters, c.Nonvoters = d.strs(), d.strs()
		cmd = c
	case TypeMoveBegin:
		c := &DirMoveBegin{Slots: d.slots()}
		c.From, c.To, c.Epoch = d.u16(), d.u16(), d.u32()
		cmd = c
	case TypeMovePhase:
		c := &DirMovePhase{Slots: d.slots()}
		c.Epoch, c.Phase, c.FreezeL = d.u32(), Phase(d.u8()), d.uvarint()
		cmd = c
	case TypeMoveAbort:
		c := &DirMoveAbort{Slots: d.slots()}
		c.Epoch = d.u32()
		cmd = c
	case TypeSetGroupMembers:
		c := &DirSetGroupMembers{Group: d.u16()}
		c.Voters, c.Nonvoters = d.strs(), d.strs()
		cmd = c
	case TypeSetGroupState:
		c := &DirSetGroupState{Group: d.u16()}
		c.State = GroupState(d.u8())
		cmd = c
	default:
		if t < FirstType {
			return nil, fmt.Errorf("placement: entry type %d is not a directory entry (those are %d and up)", t, FirstType)
		}
		return nil, fmt.Errorf("placement: entry type %d is unknown to this node: upgrade this node", t)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Errorf("%d trailing bytes", len(d.b)))
	}
	if d.err != nil {
		return nil, fmt.Errorf("placement: cannot decode %s entry: %w", t, d.err)
	}
	return cmd, nil
}

// The wire primitives: unsigned varints, in their shortest form only, and
// length-prefixed lists. The
// decoder never trusts a count: one longer than what is left is an error,
// so garbage cannot make it allocate more than its input.

type encoder struct{ b []byte }

func (e *encoder) byte1(v byte)     { e.b = append(e.b, v) }
func (e *encoder) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) str(s string) {
	e.uvarint(uint64(len(s)))
	e.b = append(e.b, s...)
}
func (e *encoder) strs(ss []string) {
	e.uvarint(uint64(len(ss)))
	for _, s := range ss {
		e.str(s)
	}
}
func (e *encoder) slots(ss []uint16) {
	e.uvarint(uint64(len(ss)))
	for _, s := range ss {
		e.uvarint(uint64(s))
	}
}

var errTruncated = errors.New("truncated")

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b = nil
}

func (d *decoder) byte1() byte {
	if len(d.b) < 1 {
		d.fail(errTruncated)
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(errors.New("bad unsigned varint"))
		return 0
	}
	if n > 1 && d.b[n-1] == 0 {
		// 0x80 0x00 is 0 too: only the shortest form is accepted, so
		// that equal values have equal bytes (the snapshot section is
		// canonical).
		d.fail(errors.New("an unsigned varint longer than its value needs"))
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bounded(max uint64, what string) uint64 {
	v := d.uvarint()
	if d.err == nil && v > max {
		d.fail(fmt.Errorf("%s %d does not fit %d", what, v, max))
		return 0
	}
	return v
}

func (d *decoder) u8() uint8   { return uint8(d.bounded(math.MaxUint8, "value")) }
func (d *decoder) u16() uint16 { return uint16(d.bounded(math.MaxUint16, "value")) }
func (d *decoder) u32() uint32 { return uint32(d.bounded(math.MaxUint32, "value")) }

// count reads a count of items each at least one byte long, refusing one
// that the rest of the input cannot hold.
func (d *decoder) count() int {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)) {
		d.fail(errTruncated)
	}
	if d.err != nil {
		return 0
	}
	return int(n)
}

func (d *decoder) str() string {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)) {
		d.fail(errTruncated)
	}
	if d.err != nil {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// strs reads a list of strings (nil when empty).
func (d *decoder) strs() []string {
	n := d.count()
	var out []string
	for i := 0; i < n && d.err == nil; i++ {
		out = append(out, d.str())
	}
	if d.err != nil {
		return nil
	}
	return out
}

// slots reads a list of uint16 values (nil when empty); their order and
// range are Apply's to check.
func (d *decoder) slots() []uint16 {
	n := d.count()
	var out []uint16
	if n > 0 {
		out = make([]uint16, 0, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		out = append(out, d.u16())
	}
	if d.err != nil {
		return nil
	}
	return out
}

package fsm

import (
	"fmt"
	"math"
)

// The seven entries of a move (groups.md §6.2, §12; DESIGN.md, "Moves
// (phase 2)"): their types, their encoding in the entry envelope, and the
// check of a slot set. The apply logic is in move_apply.go, the export
// and the chunks in move_export.go and move_stage.go.

// SetGroup records the group's id in its log: the first entry the first
// leader of a group g ≥ 1 proposes. Repeated, it is a no-op; Import is
// refused in a group g ≥ 1 until it was applied. An id other than the
// machine's own is an error of ApplyBytes (the caller stops the replica,
// as for an undecodable entry) and a refusal of Apply that changes
// nothing, not even the last index: a data directory opened as the wrong
// group stops at replay instead of serving.
type SetGroup struct {
	Group uint16
}

// Freeze starts moving Slots out to group To at Epoch (source): each slot
// goes from owned to frozen, so every namespace-scoped command on it is
// refused with CodeMoving from this entry on, and the slots' tombstones are
// copied out of the shared FIFO, so that Export is a function of the state
// at this entry. Repeated at the same epoch, it is a no-op.
type Freeze struct {
	Slots []uint16 // strictly ascending, each < Slots
	Epoch uint32   // above the slots' owned epoch
	To    uint16
}

// ImportChunk stages chunk Seq of an export of Slots at Epoch (target).
// Chunks are applied in seq order from 0: a repeated seq is a no-op, a
// seq past the next one is refused. Staged objects are unreachable until
// Import. After a Reject at that epoch or above it is a no-op (refused,
// changing nothing).
type ImportChunk struct {
	Slots []uint16
	Epoch uint32
	Seq   uint32
	Data  []byte
}

// Import ends a move into this group (target): N chunks staged at Epoch
// whose SHA-256 (Export.SHA256) is SHA256, else refused; the token offset
// raised above FloorL, the logical index of the source's Freeze
// (groups.md §7); the slots owned at Epoch; the staged objects live.
// It grants nothing and emits nothing. Repeated, it is a no-op; after a
// Reject at that epoch or above it is refused and changes nothing.
type Import struct {
	Slots  []uint16
	Epoch  uint32
	N      uint32
	FloorL uint64
	SHA256 [32]byte
}

// Reject aborts a move into this group (target): the staged chunks of
// the slots are dropped and every later ImportChunk or Import of them at
// Epoch or below is a no-op. Refused once Import applied at Epoch: such a
// move is finished forward. The source's Unfreeze must come after it.
type Reject struct {
	Slots []uint16
	Epoch uint32
}

// Unfreeze aborts a move out of this group (source, after the target's
// Reject): the slots, frozen at Epoch by one Freeze of exactly these
// slots, are owned again (at Epoch).
type Unfreeze struct {
	Slots []uint16
	Epoch uint32
}

// Drop ends a move out of this group (source, after the target's Import):
// the objects of the slots, frozen at Epoch by one Freeze of exactly
// these slots, are removed, and the slots become gone to the Freeze's
// target: refused with CodeMoved.
type Drop struct {
	Slots []uint16
	Epoch uint32
}

func (SetGroup) Type() EntryType    { return typeSetGroup }
func (Freeze) Type() EntryType      { return typeFreeze }
func (ImportChunk) Type() EntryType { return typeImportChunk }
func (Import) Type() EntryType      { return typeImport }
func (Reject) Type() EntryType      { return typeReject }
func (Unfreeze) Type() EntryType    { return typeUnfreeze }
func (Drop) Type() EntryType        { return typeDrop }

// checkSlotSet is the shape every move entry's slot set must have: not
// empty, strictly ascending, each below Slots. The decoder refuses
// another, and Apply refuses it too (for commands built in memory).
func checkSlotSet(slots []uint16) error {
	if len(slots) == 0 {
		return fmt.Errorf("no slots")
	}
	for i, s := range slots {
		if s >= Slots {
			return fmt.Errorf("slot %d is not below %d", s, Slots)
		}
		if i > 0 && s <= slots[i-1] {
			return fmt.Errorf("slots are not strictly ascending at %d", s)
		}
	}
	return nil
}

func encodeSlots(en *encoder, slots []uint16) {
	en.uvarint(uint64(len(slots)))
	for _, s := range slots {
		en.uvarint(uint64(s))
	}
}

func decodeSlots(d *decoder) []uint16 {
	n := d.count(1)
	if d.err != nil {
		return nil
	}
	slots := make([]uint16, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		v := d.uvarint()
		if v >= Slots {
			d.fail(fmt.Errorf("slot %d is not below %d", v, Slots))
			break
		}
		slots = append(slots, uint16(v))
	}
	if d.err == nil {
		if err := checkSlotSet(slots); err != nil {
			d.fail(err)
		}
	}
	return slots
}

func (d *decoder) uint16v() uint16 {
	v := d.uvarint()
	if d.err == nil && v > math.MaxUint16 {
		d.fail(fmt.Errorf("%d is not a group id", v))
	}
	return uint16(v)
}

func (d *decoder) uint32v() uint32 {
	v := d.uvarint()
	if d.err == nil && v > math.MaxUint32 {
		d.fail(fmt.Errorf("%d does not fit 32 bits", v))
	}
	return uint32(v)
}

// encodeMoveCmd encodes the fields of a move entry (false: not one).
func encodeMoveCmd(en *encoder, cmd Command) bool {
	switch c := cmd.(type) {
	case *SetGroup:
		en.uvarint(uint64(c.Group))
	case *Freeze:
		encodeSlots(en, c.Slots)
		en.uvarint(uint64(c.Epoch))
		en.uvarint(uint64(c.To))
	case *ImportChunk:
		encodeSlots(en, c.Slots)
		en.uvarint(uint64(c.Epoch))
		en.uvarint(uint64(c.Seq))
		en.bytes(c.Data)
	case *Import:
		encodeSlots(en, c.Slots)
		en.uvarint(uint64(c.Epoch))
		en.uvarint(uint64(c.N))
		en.uvarint(c.FloorL)
		en.bytes(c.SHA256[:])
	case *Reject:
		encodeSlots(en, c.Slots)
		en.uvarint(uint64(c.Epoch))
	case *Unfreeze:
		encodeSlots(en, c.Slots)
		en.uvarint(uint64(c.Epoch))
	case *Drop:
		encodeSlots(en, c.Slots)
		en.uvarint(uint64(c.Epoch))
	default:
		return false
	}
	return true
}

// decodeMoveCmd decodes what encodeMoveCmd wrote (false: not a move entry).
func decodeMoveCmd(d *decoder, cmd Command) bool {
	switch c := cmd.(type) {
	case *SetGroup:
		c.Group = d.uint16v()
	case *Freeze:
		c.Slots, c.Epoch, c.To = decodeSlots(d), d.uint32v(), d.uint16v()
	case *ImportChunk:
		c.Slots, c.Epoch, c.Seq, c.Data = decodeSlots(d), d.uint32v(), d.uint32v(), d.bytes()
	case *Import:
		c.Slots, c.Epoch, c.N, c.FloorL = decodeSlots(d), d.uint32v(), d.uint32v(), d.uvarint()
		if sum := d.bytes(); d.err == nil && len(sum) != len(c.SHA256) {
			d.fail(fmt.Errorf("a SHA-256 of %d bytes", len(sum)))
		} else {
			copy(c.SHA256[:], sum)
		}
	case *Reject:
		c.Slots, c.Epoch = decodeSlots(d), d.uint32v()
	case *Unfreeze:
		c.Slots, c.Epoch = decodeSlots(d), d.uint32v()
	case *Drop:
		c.Slots, c.Epoch = decodeSlots(d), d.uint32v()
	default:
		return false
	}
	return true
}

// newMoveCmd is newCmd for the move entries.
func newMoveCmd(t EntryType) Command {
	switch t {
	case typeSetGroup:
		return &SetGroup{}
	case typeFreeze:
		return &Freeze{}
	case typeImportChunk:
		return &ImportChunk{}
	case typeImport:
		return &Import{}
	case typeReject:
		return &Reject{}
	case typeUnfreeze:
		return &Unfreeze{}
	case typeDrop:
		return &Drop{}
	}
	return nil
}

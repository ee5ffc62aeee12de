package fsm

import (
	"fmt"
	"hash/crc32"
)

// Groups groundwork (issue 27, ../shared/design/groups.md §5–§7; DESIGN.md,
// "Groups groundwork"). One cluster may run several Raft groups, each
// applying its own log into its own Machine. What a group serves is
// decided here, from its own log (groups.md I1): the namespaces hash into
// Slots slots, and a Machine applies a namespace-scoped command, and
// answers a read, only for a slot it owns. Phase 1 (this code) adds the
// state and the checks and changes nothing for group 0, which is built
// owning every slot at epoch 0 with a token offset of 0: that is every
// machine New makes, every old data directory and every old snapshot
// (groups.md I4). Phase 2 (move_*.go; DESIGN.md, "Moves (phase 2)")
// changes slots and the offset with the move entries: Freeze (owned →
// frozen), Import (absent or gone → owned, offset raised), Unfreeze
// (frozen → owned) and Drop (frozen → gone).

// Slots is the number of slots namespaces hash into. It is part of the
// data format: it never changes.
const Slots = 4096

// crc32c is CRC-32 with the Castagnoli polynomial, the slot hash.
var crc32c = crc32.MakeTable(crc32.Castagnoli)

// Slot is the slot of a namespace: the CRC-32C (Castagnoli) of its bytes,
// mod Slots. Part of the data format: it never changes.
func Slot(namespace string) uint16 {
	return uint16(crc32.Checksum([]byte(namespace), crc32c) % Slots)
}

// A session id is its group in the top 16 bits and the raw Raft index of
// its OpenSession in the low 48 (groups.md §6.5): unique cluster-wide,
// and a session keeps it when its namespace moves. Group 0's ids are the
// raw index, as before.
const (
	sessionGroupShift = 48
	rawMask           = 1<<sessionGroupShift - 1
	// MaxRawIndex bounds the raw Raft indexes a Machine applies: an entry
	// at this index or above is refused (Apply) or an error (ApplyBytes),
	// since its session id would carry another group's prefix. 2^48
	// entries is about nine years at a million entries a second.
	MaxRawIndex = 1 << sessionGroupShift
)

// sessionID is the id of a session opened by group g at raw index raw.
func sessionID(g uint16, raw uint64) uint64 { return uint64(g)<<sessionGroupShift | raw }

// sessionGroup is the group that opened session id.
func sessionGroup(id uint64) uint16 { return uint16(id >> sessionGroupShift) }

// slotKind is what a group knows of one slot.
type slotKind uint8

const (
	// slotAbsent: the group never owned the slot (or it was never
	// imported). Refused with CodeMoving, without a target.
	slotAbsent slotKind = iota
	// slotOwned: the group serves the slot, since epoch.
	slotOwned
	// slotFrozen: the slot is moving to group to at epoch (Freeze
	// applied, Drop not yet). Refused with CodeMoving.
	slotFrozen
	// slotGone: the slot moved to group to at epoch (Drop applied).
	// Refused with CodeMoved.
	slotGone
	numSlotKinds
)

// slotState is one slot of a group's ownership table (groups.md §6.1).
type slotState struct {
	kind  slotKind
	to    uint16 // frozen, gone: the target group
	epoch uint32 // owned: since when; frozen, gone: the move's
}

// SlotInfo tells where a refused namespace's slot is (CodeMoving,
// CodeMoved; Error.Slot).
type SlotInfo struct {
	Slot  uint16
	To    uint16 // the group it moves or moved to, when Known
	Epoch uint32 // the move's epoch, when Known
	// Known is false for a slot this group never owned (absent): the
	// caller must read its directory again.
	Known bool
}

// newGroupState is the state of a new group g: group 0 owns every slot
// at epoch 0, a group g ≥ 1 none. The same on every replica, whatever
// the flags: a replica that replays its log from index 1 starts from it.
func newGroupState(g uint16) *state {
	st := newState()
	st.group = g
	if g != 0 {
		for i := range st.slots {
			st.slots[i] = slotState{kind: slotAbsent}
		}
		st.ownsAll = false
	}
	return st
}

// ownAllSlots makes st own every slot at epoch 0: group 0's default.
func (st *state) ownAllSlots() {
	for i := range st.slots {
		st.slots[i] = slotState{kind: slotOwned}
	}
	st.ownsAll = true
}

// computeOwnsAll recomputes ownsAll from the table (after a restore, and
// after every move entry that changes a slot).
func (st *state) computeOwnsAll() {
	for i := range st.slots {
		if st.slots[i].kind != slotOwned {
			st.ownsAll = false
			return
		}
	}
	st.ownsAll = true
}

// defaultGroups reports whether st's group state is the default, which
// the snapshot formats before 5 imply: group 0, every slot owned at
// epoch 0, offset 0, no move in progress (nothing staged or rejected). Only then is a snapshot written as before (I4).
func (st *state) defaultGroups() bool {
	if st.group != 0 || st.offset != 0 || !st.ownsAll || !st.mv.empty() {
		return false
	}
	for i := range st.slots {
		if st.slots[i].epoch != 0 {
			return false
		}
	}
	return true
}

// owns is the ownership check (groups.md §6.3): nil when the group serves
// namespace ns, else the refusal, which changes nothing. It runs first in
// every namespace-scoped apply and read. While the group owns every slot
// (group 0 until it moves a slot out) it is one load; otherwise a CRC-32C of the
// name and an array index.
func (st *state) owns(ns string) *Error {
	if st.ownsAll {
		return nil
	}
	return st.slotRefusal(ns, Slot(ns))
}

// ownsSession is owns for the namespace of a session (nil: s is nil).
func (st *state) ownsSession(s *session) *Error {
	if s == nil || st.ownsAll {
		return nil
	}
	return st.slotRefusal(s.ns.name, Slot(s.ns.name))
}

func (st *state) slotRefusal(ns string, slot uint16) *Error {
	ss := st.slots[slot]
	var e *Error
	switch ss.kind {
	case slotOwned:
		return nil
	case slotFrozen:
		e = errorf(CodeMoving, "namespace %s (slot %d) is moving from group %d to group %d (epoch %d): try again shortly", quote(ns), slot, st.group, ss.to, ss.epoch)
		e.slot = &SlotInfo{Slot: slot, To: ss.to, Epoch: ss.epoch, Known: true}
	case slotGone:
		e = errorf(CodeMoved, "namespace %s (slot %d) moved from group %d to group %d (epoch %d)", quote(ns), slot, st.group, ss.to, ss.epoch)
		e.slot = &SlotInfo{Slot: slot, To: ss.to, Epoch: ss.epoch, Known: true}
	default:
		e = errorf(CodeMoving, "namespace %s (slot %d) is not served by group %d: read the directory again and retry", quote(ns), slot, st.group)
		e.slot = &SlotInfo{Slot: slot}
	}
	return e
}

// NewGroup returns an empty lock manager of group g with the default
// limits: New is NewGroup(0), which owns every slot; a group g ≥ 1 owns
// none until an Import (move_apply.go) gives it some, and refuses every
// namespace-scoped command meanwhile.
func NewGroup(g uint16) *Machine {
	return &Machine{st: newGroupState(g), group: g}
}

// Group is the group this machine applies the log of.
func (m *Machine) Group() uint16 { return m.group }

// Logical is the logical index of raw Raft index raw (groups.md §6.4): raw
// plus the group's token offset as it is now, which is the offset in force
// at the last applied entry and after it. Everything a client sees as an
// index or a token is logical; raft, checkpoints and the operator's status
// keep the raw index. With one group the offset is 0: Logical(i) = i.
//
// It takes no lock (the offset is mirrored in an atomic): every reply and
// every event asks for it, and a read lock each time met the FSM's write
// lock on every entry.
func (m *Machine) Logical(raw uint64) uint64 {
	return raw + m.offset.Load()
}

// LastLogical is Logical(LastIndex()): the index a client compares its
// min_index with.
func (m *Machine) LastLogical() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.logical(m.st.lastIndex)
}

func (st *state) logical(raw uint64) uint64 { return raw + st.offset }

// Owns is the ownership check for a read that names namespace ns: nil
// when this group serves it, else the CodeMoving or CodeMoved refusal
// that Apply would give. The reads without an error of their own (Query,
// QueryMatching, Record, SessionsIn) answer as for an empty namespace on
// a slot not owned; a caller that must tell "moving" from "empty" asks
// Owns first, under the same state (the server's step in phase 3).
func (m *Machine) Owns(ns string) *Error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.owns(ns)
}

// OwnsSession is Owns for the namespace of session id: nil when the
// session is not known here or its slot is owned. SessionRequests and
// Outcome answer "not open" for a session of a slot not owned; a caller
// asks OwnsSession first to answer "moving", never "closed" (groups.md
// §3.1: "closed" ends the client's session).
func (m *Machine) OwnsSession(id uint64) *Error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.ownsSession(m.st.sessions[id])
}

// checkRawIndex refuses a raw index at or past MaxRawIndex.
func checkRawIndex(index uint64) *Error {
	if index >= MaxRawIndex {
		return errorf(CodeInvalid, "entry index %d is at or past 2^48, the bound of a session id's raw part: this group must stop", index)
	}
	return nil
}

// --- snapshots: the groups section (format 5) ------------------------------

// encodeGroups writes the group, the offset and the slot table as runs of
// equal slots: (length, kind, to, epoch).
func encodeGroups(en *encoder, g *groupsAt) {
	en.uvarint(uint64(g.group))
	en.uvarint(g.offset)
	var runs []int
	for i := 1; i <= Slots; i++ {
		if i == Slots || g.slots[i] != g.slots[i-1] {
			runs = append(runs, i)
		}
	}
	en.uvarint(uint64(len(runs)))
	start := 0
	for _, end := range runs {
		ss := g.slots[start]
		en.uvarint(uint64(end - start))
		en.byte1(byte(ss.kind))
		en.uvarint(uint64(ss.to))
		en.uvarint(uint64(ss.epoch))
		start = end
	}
	encodeMoves(en, &g.moves) // move_snap.go
}

// decodeGroups reads what encodeGroups wrote into st.
func decodeGroups(d *decoder, st *state) error {
	g := d.uvarint()
	st.offset = d.uvarint()
	if d.err == nil && g > 0xffff {
		return fmt.Errorf("fsm: snapshot of group %d: no such group", g)
	}
	st.group = uint16(g)
	n := d.count(4)
	i := 0
	for k := 0; k < n && d.err == nil; k++ {
		length, kind, to, epoch := d.uvarint(), slotKind(d.byte1()), d.uvarint(), d.uvarint()
		if d.err != nil {
			break
		}
		if length == 0 || length > uint64(Slots-i) || kind >= numSlotKinds || to > 0xffff || epoch > 0xffffffff ||
			(kind == slotAbsent && (to != 0 || epoch != 0)) || (kind == slotOwned && to != 0) {
			return fmt.Errorf("fsm: snapshot slot table is malformed at slot %d", i)
		}
		for end := i + int(length); i < end; i++ {
			st.slots[i] = slotState{kind: kind, to: uint16(to), epoch: uint32(epoch)}
		}
	}
	if d.err == nil && i != Slots {
		return fmt.Errorf("fsm: snapshot slot table has %d of %d slots", i, Slots)
	}
	st.computeOwnsAll()
	if d.err == nil {
		if err := decodeMoves(d, st); err != nil { // move_snap.go
			return err
		}
	}
	if d.err == nil && st.defaultGroups() {
		// Format 5 is written only for a state that differs (I4): equal
		// states have equal bytes.
		return fmt.Errorf("fsm: snapshot format 5 holds the default group state")
	}
	return nil
}

// groupsAt is what BeginSnapshot captures of a non-default group state.
type groupsAt struct {
	group  uint16
	offset uint64
	slots  [Slots]slotState
	moves  movesAt // move_snap.go
}

// checkGroups verifies a restored state against its group (groups.md
// §6.6): every namespace present is on a slot the group owns or is
// moving out (frozen). The ids' order is decodeSessions' check, and the
// bounds on ids, tokens and indexes are checkScheduling's.
func checkGroups(st *state) error {
	if !st.ownsAll {
		for name := range st.namespaces {
			if k := st.slots[Slot(name)].kind; k != slotOwned && k != slotFrozen {
				return fmt.Errorf("fsm: snapshot of group %d has namespace %s on slot %d, which it does not serve", st.group, quote(name), Slot(name))
			}
		}
	}
	return nil
}

// namespaceOf returns the namespace a namespace-scoped command names
// (ExpireSession names none: its session's is checked at apply).
func namespaceOf(cmd Command) (id uint64, ns string, ok bool) {
	switch c := cmd.(type) {
	case *OpenSession:
		if c != nil {
			return 0, c.Namespace, true
		}
	case *CloseSession:
		if c != nil {
			return c.Session, c.Namespace, true
		}
	case *Request:
		if c != nil {
			return c.Session, c.Namespace, true
		}
	case *Release:
		if c != nil {
			return c.Session, c.Namespace, true
		}
	case *Abort:
		if c != nil {
			return c.Session, c.Namespace, true
		}
	case *SetRecord:
		if c != nil {
			return c.Session, c.Namespace, true
		}
	}
	return 0, "", false
}

// findOwnLast sets ownLast after a restore, which links the sessions
// before it reads the group: the last session of the group's own prefix.
func (st *state) findOwnLast() {
	st.ownLast = nil
	for s := st.sessTail; s != nil; s = s.older {
		if sessionGroup(s.id) == st.group {
			st.ownLast = s
			return
		}
	}
}

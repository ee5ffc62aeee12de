package fsm

import (
	"slices"
)

// The replicated state of the moves in progress (groups.md §6.1): what
// state.mv holds, and the helpers the move entries share. Group 0 with no
// move in progress has it empty, which is part of the default group state
// (defaultGroups): its snapshots stay byte-identical (I4).

type moveState struct {
	// groupSet: SetGroup was applied (only ever in a group g ≥ 1; group
	// 0 needs none, and its SetGroup{0} changes nothing).
	groupSet bool
	// out maps each frozen slot to its Freeze. Every slot of one Freeze
	// maps to the same outMove, which never changes: Unfreeze and Drop
	// take all of its slots at once.
	out map[uint16]*outMove
	// rejected is, per slot, the highest epoch a Reject refused: an
	// ImportChunk or Import of the slot at that epoch or below is a no-op.
	rejected map[uint16]uint32
	// staging holds the imports in progress, by (epoch, slot set).
	staging map[stageKey]*stage
}

func (mv *moveState) empty() bool {
	return !mv.groupSet && len(mv.out) == 0 && len(mv.rejected) == 0 && len(mv.staging) == 0
}

// outMove is one Freeze: its slots, epoch and target, the logical index
// of the Freeze entry (F_L, the Import's floor) and the tombstones of the
// slots' namespaces copied out of the shared FIFO at that entry, oldest
// first. Immutable once made, so a snapshot may share it.
type outMove struct {
	slots  []uint16
	epoch  uint32
	to     uint16
	floorL uint64
	tombs  []tombstone
}

// stageKey names one import in progress: its epoch and its slot set (the
// slots' encoding as a string).
type stageKey struct {
	epoch uint32
	slots string
}

func keyOf(slots []uint16, epoch uint32) stageKey {
	en := encoder{}
	encodeSlots(&en, slots)
	return stageKey{epoch: epoch, slots: string(en.b)}
}

// slotSet is a set of slots, for "is this namespace's slot one of them".
type slotSet map[uint16]bool

func setOf(slots []uint16) slotSet {
	s := make(slotSet, len(slots))
	for _, x := range slots {
		s[x] = true
	}
	return s
}

func (s slotSet) has(ns string) bool { return s[Slot(ns)] }

// overlaps reports whether two ascending slot lists share a slot.
func overlaps(a, b []uint16) bool {
	for _, x := range a {
		if _, ok := slices.BinarySearch(b, x); ok {
			return true
		}
	}
	return false
}

// moveOf returns the Freeze that froze every slot of slots at epoch,
// made of exactly these slots, or nil.
func (st *state) moveOf(slots []uint16, epoch uint32) *outMove {
	mv := st.mv.out[slots[0]]
	if mv == nil || mv.epoch != epoch || !slices.Equal(mv.slots, slots) {
		return nil
	}
	for _, s := range slots {
		if ss := st.slots[s]; ss.kind != slotFrozen || ss.epoch != epoch || st.mv.out[s] != mv {
			return nil
		}
	}
	return mv
}

// allSlots reports whether every slot of slots is in state want.
func (st *state) allSlots(slots []uint16, want slotState) bool {
	for _, s := range slots {
		if st.slots[s] != want {
			return false
		}
	}
	return true
}

// importable reports whether slot s may be imported at epoch: the group
// does not serve it (absent), or it moved out at an earlier epoch (gone).
func (st *state) importable(s uint16, epoch uint32) bool {
	switch ss := st.slots[s]; ss.kind {
	case slotAbsent:
		return true
	case slotGone:
		return ss.epoch < epoch
	}
	return false
}

// rejectedAt reports whether a Reject covers some slot of slots at epoch.
func (st *state) rejectedAt(slots []uint16, epoch uint32) bool {
	for _, s := range slots {
		if e, ok := st.mv.rejected[s]; ok && e >= epoch {
			return true
		}
	}
	return false
}

// dropStages drops every staged import that shares a slot with slots at
// epoch or below.
func (st *state) dropStages(slots []uint16, epoch uint32) {
	for k, sg := range st.mv.staging {
		if sg.epoch <= epoch && overlaps(sg.slots, slots) {
			delete(st.mv.staging, k)
		}
	}
}

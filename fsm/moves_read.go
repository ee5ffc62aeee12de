package fsm

import (
	"slices"
)

// OutMove is one move out of this group in progress: a Freeze applied
// whose Drop (or Unfreeze) is not yet.
type OutMove struct {
	Slots []uint16 // ascending
	Epoch uint32
	To    uint16
}

// MovesOut lists this replica's moves out in progress, by first slot.
// The node's mover drives each to its end (internal/node/mover.go); like
// Slot, it is a report, never a licence to serve.
func (m *Machine) MovesOut() []OutMove {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if len(m.st.mv.out) == 0 {
		return nil
	}
	seen := map[*outMove]bool{}
	var out []OutMove
	for _, mv := range m.st.mv.out {
		if !seen[mv] {
			seen[mv] = true
			out = append(out, OutMove{Slots: slices.Clone(mv.slots), Epoch: mv.epoch, To: mv.to})
		}
	}
	slices.SortFunc(out, func(a, b OutMove) int { return int(a.Slots[0]) - int(b.Slots[0]) })
	return out
}

// Rejected reports whether this replica applied a Reject of slot at epoch
// or above (an aborted import: an Import at that epoch is a no-op here).
func (m *Machine) Rejected(slot uint16, epoch uint32) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.mv.rejected[slot] >= epoch && epoch > 0
}

// HoldsSession reports whether this replica has session id open, and
// whether it serves the session's slot (false while the slot is frozen
// for a move): the router sends a renewal to the group that has it.
func (m *Machine) HoldsSession(id uint64) (has, serves bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := m.st.sessions[id]
	if s == nil {
		return false, false
	}
	return true, m.st.ownsSession(s) == nil
}

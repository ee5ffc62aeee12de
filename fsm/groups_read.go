package fsm

// Reads of a group's ownership table for the node's group manager
// (internal/node: the initial spread of a cluster of several groups, and
// the router). They are reports of this replica's state, never a licence
// to serve: every command and read still passes the ownership check
// (groups.md I1).

// SlotView is one slot of this replica's ownership table.
type SlotView struct {
	Owned  bool   // the group serves the slot, since Epoch
	Frozen bool   // moving to group To at Epoch (Freeze applied, no Drop yet)
	Gone   bool   // moved to group To at Epoch (Drop applied)
	To     uint16 // Frozen, Gone: the target group
	Epoch  uint32
}

// Slot is this replica's view of slot (which must be below Slots).
func (m *Machine) Slot(slot uint16) SlotView {
	m.mu.RLock()
	defer m.mu.RUnlock()
	ss := m.st.slots[slot]
	return SlotView{Owned: ss.kind == slotOwned, Frozen: ss.kind == slotFrozen, Gone: ss.kind == slotGone, To: ss.to, Epoch: ss.epoch}
}

// OwnedSlots counts the slots this group serves.
func (m *Machine) OwnedSlots() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n := 0
	for _, ss := range m.st.slots {
		if ss.kind == slotOwned {
			n++
		}
	}
	return n
}

// GroupSet reports whether this group's SetGroup was applied (always true
// in group 0, which needs none).
func (m *Machine) GroupSet() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.group == 0 || m.st.mv.groupSet
}

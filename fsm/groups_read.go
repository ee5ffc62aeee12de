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

// SlotSession is one open session of SlotSessions: its id and its TTL
// (the client's, in nanoseconds).
type SlotSession struct {
	ID  uint64
	TTL int64
}

// SlotSessions lists the open sessions of the namespaces on slots, by id,
// whatever the slots' state here (owned, frozen): what the server arms or
// forgets when a Freeze, an Import or an Unfreeze of those slots is
// applied (Applied.Move; groups.md §8.2). Like Slot, a report, never a
// licence to serve. It costs one pass over the namespaces (a CRC-32C of
// each name) and, when the slots hold any session, one pass over the
// sessions (a pointer lookup each), under the read lock: a few
// milliseconds for 100,000 sessions, nothing for slots without one.
func (m *Machine) SlotSessions(slots []uint16) []SlotSession {
	m.mu.RLock()
	defer m.mu.RUnlock()
	set := setOf(slots)
	in := map[*namespace]bool{}
	n := int64(0)
	for name, ns := range m.st.namespaces {
		if ns.sessions > 0 && set.has(name) {
			in[ns] = true
			n += ns.sessions
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]SlotSession, 0, n)
	for s := m.st.sessHead; s != nil; s = s.newer {
		if in[s.ns] {
			out = append(out, SlotSession{ID: s.id, TTL: s.ttl})
		}
	}
	return out
}

// RefusedSessions returns, in order, the ids among ids whose session this
// group knows and does not serve (OwnsSession refuses it), under one hold
// of the read lock; nil when there is none, at once while the group owns
// every slot (group 0 of a cluster of one group). A session this group
// does not know is not refused: the caller answers it as unknown.
func (m *Machine) RefusedSessions(ids []uint64) []uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.st.ownsAll {
		return nil
	}
	var out []uint64
	for _, id := range ids {
		if m.st.ownsSession(m.st.sessions[id]) != nil {
			out = append(out, id)
		}
	}
	return out
}

// SlotsLost counts the entries this machine applied by which its group
// stopped serving slots (Freeze, Drop), without the lock: a caller that
// reads it before and after a wait knows whether a slot left the group
// meanwhile (the server's Touch, across a renewal's confirmation). It is
// counted under the write lock with the entry, so a read of the state
// that comes after the entry's apply sees the count with it. Always 0 in
// group 0 of a cluster of one group.
func (m *Machine) SlotsLost() uint64 { return m.slotsLost.Load() }

// UnservedSessions is RefusedSessions that also names the ids whose
// session this group does not know (any more): what a caller that saw a
// slot leave the group meanwhile (a Freeze and a Drop) must not take for
// a session served here, nor for one ended, as the Drop removed the
// slot's sessions with it.
func (m *Machine) UnservedSessions(ids []uint64) []uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []uint64
	for _, id := range ids {
		if s := m.st.sessions[id]; s == nil || m.st.ownsSession(s) != nil {
			out = append(out, id)
		}
	}
	return out
}

// MovingError is the CodeMoving refusal of namespace ns for a caller that
// learnt from elsewhere (the leader of its group) that the namespace's
// slot is moving, while this replica still serves it: it has not applied
// the Freeze yet. The slot is named, its target not (SlotInfo.Known is
// false: read the directory again).
func MovingError(ns, msg string) *Error {
	return &Error{Code: CodeMoving, Msg: msg, slot: &SlotInfo{Slot: Slot(ns)}}
}

package placement

import (
	"fmt"
	"slices"
	"sync"

	"github.com/lockcluster/lockcluster/fsm"
)

// Machine is group 0's replica of the directory: the state, applied one
// entry at a time in log order, and read by the router and the mover
// under a read lock. It is safe for concurrent use.
type Machine struct {
	mu   sync.RWMutex
	st   *state
	last uint64 // the raft index of the last entry applied (0: none, or restored without one)
}

// New returns a machine in the default state: every slot to group 0 at
// epoch 0, no group beyond 0, no move.
func New() *Machine { return &Machine{st: newState()} }

// Apply decodes and applies the entry at raft index index. The error is
// for an entry that does not decode (DecodeEntry): the caller stops the
// replica, as for an undecodable fsm entry. A refusal is Result.Err and
// changes nothing.
func (m *Machine) Apply(index uint64, data []byte) (Result, error) {
	cmd, err := DecodeEntry(data)
	if err != nil {
		return Result{}, fmt.Errorf("placement: entry %d: %w", index, err)
	}
	return m.ApplyCommand(index, cmd), nil
}

// ApplyCommand applies a decoded command at raft index index, which must
// be above the last one applied (else refused, as fsm refuses it).
func (m *Machine) ApplyCommand(index uint64, cmd Command) Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	if index <= m.last {
		return refused(refuse(CodeInvalid, "entry index %d is not after the last applied index %d", index, m.last))
	}
	m.last = index
	if cmd == nil {
		return refused(refuse(CodeInvalid, "no command"))
	}
	return m.st.apply(cmd)
}

// LastIndex is the raft index of the last entry applied (or restored).
func (m *Machine) LastIndex() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.last
}

// Lookup is where namespace ns routes: its slot's group and epoch.
func (m *Machine) Lookup(ns string) (group uint16, epoch uint32) {
	g, e, _ := m.LookupSlot(fsm.Slot(ns))
	return g, e
}

// LookupSlot is where slot routes: its group and epoch; ok is false (and
// the rest 0) for a slot not below fsm.Slots.
func (m *Machine) LookupSlot(slot uint16) (group uint16, epoch uint32, ok bool) {
	if slot >= fsm.Slots {
		return 0, 0, false
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	r := m.st.slots[slot]
	return r.group, r.epoch, true
}

// Groups are the groups, group 0 first, by id.
func (m *Machine) Groups() []GroupInfo {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.groupInfos()
}

// Group is group g, if it exists.
func (m *Machine) Group(g uint16) (GroupInfo, bool) {
	for _, gi := range m.Groups() {
		if gi.ID == g {
			return gi, true
		}
	}
	return GroupInfo{}, false
}

// NextGroup is the id the next DirCreateGroup must name (65535: none is
// left).
func (m *Machine) NextGroup() uint16 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.nextGroup
}

// Moves are the move records, in progress or finished (dropped, aborted,
// kept until a later move of one of their slots begins), by their first
// slot. Their slot sets are disjoint.
func (m *Machine) Moves() []Move {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []Move
	for _, mv := range m.st.distinctMoves() {
		out = append(out, mv.export())
	}
	return out
}

// MoveOf is the record of slot's last move, if it has one.
func (m *Machine) MoveOf(slot uint16) (Move, bool) {
	if slot >= fsm.Slots {
		return Move{}, false
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if mv := m.st.moves[slot]; mv != nil {
		return mv.export(), true
	}
	return Move{}, false
}

// Empty reports whether the directory is the default state, which
// Encode writes as nothing (groups.md I4).
func (m *Machine) Empty() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.empty()
}

func (st *state) groupInfos() []GroupInfo {
	counts := make([]int, int(st.nextGroup)) // every group id is below nextGroup
	for i := range st.slots {
		counts[st.slots[i].group]++
	}
	out := []GroupInfo{{ID: 0, State: GroupServing, Slots: counts[0]}}
	ids := make([]uint16, 0, len(st.groups))
	for id := range st.groups {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		g := st.groups[id]
		out = append(out, GroupInfo{ID: id, Voters: slices.Clone(g.voters), Nonvoters: slices.Clone(g.nonvoters), State: g.state, Slots: counts[id]})
	}
	return out
}

// distinctMoves are the move records, each once, by first slot.
func (st *state) distinctMoves() []*move {
	var out []*move
	for s := range st.moves {
		if mv := st.moves[s]; mv != nil && int(mv.slots[0]) == s {
			out = append(out, mv)
		}
	}
	return out
}

package fsm

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Machine is the lock manager of one replica. Apply must be called with
// strictly increasing indexes from one goroutine (Raft's FSM goroutine);
// the read methods may be called from any goroutine at any time.
type Machine struct {
	mu sync.RWMutex // Apply and Restore write; readers read
	// snapMu is held from BeginSnapshot to the end of Encode: one snapshot
	// at a time (copy-on-write keeps one point; the encoder numbers the
	// requests).
	snapMu sync.Mutex
	st     *state
	a      applier // reused between entries: its work list keeps its capacity
	// snapYield, when set (by tests), runs each time the encoder drops the
	// read lock between chunks.
	snapYield func()
	snapChunk int // objects per chunk when set (by tests)
	// exportChunk bounds an export's chunks in objects when set (by
	// tests; move_export.go).
	exportChunk int
	// keepChanges: Apply collects Applied.Changes (KeepChanges).
	keepChanges bool
	// keepWatched: Apply collects them after the state's StartChanges
	// (KeepChangesWhenWatched, startchanges.go).
	keepWatched bool
	// changeBuf: the entries' changes are carved from it, one chunk of
	// changeChunk at a time, so that an entry's changes cost no
	// allocation of their own (change.go).
	changeBuf []Change
	// offset mirrors st.offset for Logical, which every reply and event
	// asks for: read without the lock, stored after every entry and
	// restore (the offset changes only at an Import).
	offset atomic.Uint64
	// group is the group this machine was built for (NewGroup): a
	// snapshot of another group is refused by Restore.
	group uint16
	// slotsLost counts the entries applied by which the group stopped
	// serving slots (Freeze, Drop): SlotsLost, read without the lock.
	slotsLost atomic.Uint64
}

// New returns an empty lock manager with the default limits: group 0,
// which serves every namespace (NewGroup, groups.go).
func New() *Machine { return &Machine{st: newState()} }

// Apply applies one entry at a Raft index and returns its result and the
// events it caused. A rejected entry changes nothing but the last index.
// An index at or past MaxRawIndex is refused and changes nothing at all
// (every replica refuses it alike; ApplyBytes reports it as an error, to
// stop the replica).
func (m *Machine) Apply(index uint64, e Entry) Applied {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.applyLocked(index, e)
}

// ApplyAll applies entries at strictly increasing indexes under one
// hold of the write lock, and returns their results in order: what
// Apply does for each, for raft's batches (raftfsm). Readers wait once per
// batch instead of once per entry; under load, the wake-ups of the readers
// each entry's lock had blocked were most of the apply goroutine's
// lock work on a 16-core machine (docs/benchmarks.md, issue 27 phase 0).
func (m *Machine) ApplyAll(indexes []uint64, es []Entry, out []Applied) []Applied {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, e := range es {
		out = append(out, m.applyLocked(indexes[i], e))
	}
	return out
}

func (m *Machine) applyLocked(index uint64, e Entry) Applied {
	if index <= m.st.lastIndex {
		return Applied{Result: Result{Err: errorf(CodeInvalid, "entry index %d is not after the last applied index %d", index, m.st.lastIndex)}}
	}
	if err := checkRawIndex(index); err != nil {
		return Applied{Result: Result{Err: err}}
	}
	if c, ok := e.Cmd.(*SetGroup); ok && c != nil {
		if err := wrongGroup(c, m.st.group); err != nil { // move_apply.go: nothing changes
			return Applied{Result: Result{Err: err}}
		}
	}
	m.st.lastIndex = index
	a := &m.a
	a.st, a.ns, a.index, a.time, a.out, a.own, a.move = m.st, nil, index, e.Time, nil, nil, nil
	a.logical = m.st.logical(index)
	a.keep, a.changes, a.ownRecords = m.keepChanges || m.keepWatched && m.st.changesFrom != 0, nil, nil
	if a.keep {
		a.changes = m.changeSpace()
	}
	res := a.apply(e.Cmd)
	m.offset.Store(m.st.offset)
	out, changes := a.out, m.takeChanges(a.changes)
	if res.Err != nil {
		changes = nil // a rejected entry changed nothing
	}
	mv := a.move
	if mv != nil && (mv.Kind == MoveFreeze || mv.Kind == MoveDrop) {
		m.slotsLost.Add(1) // under the write lock: a reader after it sees both
	}
	a.out, a.ns, a.own, a.changes, a.ownRecords, a.move = nil, nil, nil, nil, nil, nil
	return Applied{Result: res, Events: out, Changes: changes, Kept: a.keep, Move: mv}
}

// ApplyBytes decodes an entry and applies it. An error means the entry
// could not be decoded, or its index is at or past MaxRawIndex, or it is
// a SetGroup of another group (move_cmd.go): the state
// is unchanged and the caller must stop the replica before its state
// diverges from the others.
func (m *Machine) ApplyBytes(index uint64, data []byte) (Applied, error) {
	e, err := DecodeEntry(data)
	if err != nil {
		return Applied{}, err
	}
	if err := m.CheckEntry(index, e); err != nil {
		return Applied{}, err
	}
	return m.Apply(index, e), nil
}

// CheckEntry reports what makes a decoded entry as fatal as an
// undecodable one, so that a caller that decodes entries itself (raftfsm)
// stops the replica as ApplyBytes' caller does: an index at or past
// MaxRawIndex, or a SetGroup of another group than the machine's
// (move_cmd.go: a data directory opened as the wrong group). Apply
// refuses both and changes nothing.
func (m *Machine) CheckEntry(index uint64, e Entry) error {
	if err := checkRawIndex(index); err != nil {
		return err
	}
	if c, ok := e.Cmd.(*SetGroup); ok && c != nil && c.Group != m.group {
		return fmt.Errorf("fsm: entry %d: %w", index, wrongGroup(c, m.group))
	}
	return nil
}

// LastIndex is the raw Raft index of the last entry applied (or
// restored); LastLogical is the index a client sees.
func (m *Machine) LastIndex() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.lastIndex
}

// Limits returns the replicated limits in force.
func (m *Machine) Limits() Limits {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.limits
}

// Stats counts what the state holds.
type Stats struct {
	LastIndex  uint64
	Namespaces int
	Sessions   int
	Held       int
	Pending    int
}

func (m *Machine) Stats() Stats {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return Stats{LastIndex: m.st.lastIndex, Namespaces: len(m.st.namespaces), Sessions: len(m.st.sessions), Held: m.st.nHeld, Pending: m.st.nPending}
}

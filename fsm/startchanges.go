package fsm

// Changes are built only once a cluster has been watched (SPEC §13).
// Building every entry's changes costs the replicas CPU and memory
// whether or not anything reads them (about a tenth of one group's
// uncontended throughput on a 16-core machine: docs/benchmarks.md), and
// most clusters are never watched. But a watch may resume on any node
// from any index the nodes keep, so every node must start building at the
// same entry: the decision is replicated.
//
//   - StartChanges is proposed by a node that is asked for a watch (or its
//     status page's live feed) while its state has none: every replica that
//     applies it builds the changes of every entry after it
//     (Machine.KeepChangesWhenWatched), for ever. The first one applied
//     wins; a later one changes nothing.
//   - Its index is the oldest a watch can resume from: before it nothing
//     was built (internal/watchhist: History.Skip).
//   - It is flagged ignore-if-unknown: a node of an earlier build, which
//     builds every entry's changes anyway, skips it.
//   - Snapshots carry its index (formats 4 and 5, last before the CRC, only
//     when set; snapshot.go), so a replica restored from one goes on
//     building; a state that has it is written in format 4 at least.

// StartChanges makes every replica build the changes of the entries after
// it, unless the state already does.
type StartChanges struct{}

func (StartChanges) Type() EntryType { return typeStartChanges }

func (a *applier) startChanges() Result {
	if a.st.changesFrom == 0 {
		a.st.changesFrom = a.index
	}
	return Result{Status: statusOK}
}

// KeepChangesWhenWatched makes Apply collect Applied.Changes for the
// entries after the cluster's StartChanges (and none before it): what a
// node does. KeepChanges(true) collects them for every entry.
func (m *Machine) KeepChangesWhenWatched() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keepWatched = true
}

// ChangesFrom is the raw index of the StartChanges entry this replica
// applied (or restored), 0 before: the changes of every entry after it are
// built.
func (m *Machine) ChangesFrom() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.changesFrom
}

package fsm

// Changes (SPEC §13): what each entry changed in a namespace, for watches,
// in the order the entry made them. They are collected only while the
// machine keeps them (Machine.KeepChanges): the applier checks its flag
// before it builds anything, so a machine that serves no watch spends
// nothing on them.
//
// The kinds and where they are made:
//
//	ChangeQueued         enqueue (a request that waits)
//	ChangeGranted        grant (at once, after a steal, or from a queue)
//	ChangeStolen         steal, one per old holder (Cause stolen)
//	ChangeReleased       release, a release with a record (no cause), and
//	                     end (Cause session closed or expired)
//	ChangeAborted        abort and end (pending requests; an abort that
//	                     raced the grant has the lock's Token)
//	ChangeSessionEnded   end, after the session's aborts and releases and
//	                     before the grants they let in (spec §2.6)
//	ChangeRecordSet      setRecord (Record: the record written)
//	ChangeRecordDeleted  setRecord (Record: its Name and the deleting Token)
//
// An ifAvailable request that is not granted, a duplicate and a rejected
// entry change nothing, and make none.

// change appends a change about request r.
func (a *applier) change(k ChangeKind, r *request, token uint64, cause Cause, reason string) {
	if !a.keep {
		return
	}
	s := r.sess
	a.changes = append(a.changes, Change{Kind: k, Namespace: a.ns.name, Names: r.names, Mode: r.mode, MaxHolders: r.maxHolders,
		Session: s.id, RequestID: r.id, ClientID: s.clientID, Label: s.label, Token: token, Cause: cause, Reason: reason})
}

// sessionEnded appends the change of a session's end.
func (a *applier) sessionEnded(s *session, cause Cause) {
	if !a.keep {
		return
	}
	a.changes = append(a.changes, Change{Kind: ChangeSessionEnded, Namespace: a.ns.name, Session: s.id, ClientID: s.clientID, Label: s.label, Cause: cause})
}

// recordChange appends a record's write or delete, by request r.
func (a *applier) recordChange(k ChangeKind, r *request, rec *Record) {
	if !a.keep {
		return
	}
	a.change(k, r, rec.Token, causeNone, "")
	a.changes[len(a.changes)-1].Record = rec
}

// changeChunk is how many changes one allocation of Machine.changeBuf
// holds.
const changeChunk = 256

// changeSpace returns an empty slice whose capacity is the rest of the
// machine's change buffer (a fresh chunk when little is left): the
// entry's changes are appended to it in place.
func (m *Machine) changeSpace() []Change {
	if cap(m.changeBuf)-len(m.changeBuf) < 4 {
		m.changeBuf = make([]Change, 0, changeChunk)
	}
	return m.changeBuf[len(m.changeBuf):len(m.changeBuf)]
}

// takeChanges returns an entry's changes, capped so that no later append
// writes past them, and moves the buffer past them when they were made
// in it (an entry with more changes than the buffer had room for was
// moved to an allocation of its own by append, and leaves it alone).
func (m *Machine) takeChanges(c []Change) []Change {
	if len(c) == 0 {
		return nil
	}
	n := len(m.changeBuf)
	if n < cap(m.changeBuf) && &m.changeBuf[:n+1][n] == &c[0] {
		m.changeBuf = m.changeBuf[:n+len(c)]
	}
	return c[:len(c):len(c)]
}

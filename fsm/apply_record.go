package fsm

import (
	"maps"
	"slices"
	"strings"
)

// Records (SPEC §12): the data a lock protects. A namespace keeps them by
// name, beside its locks; a record is written only by the session that
// holds the name exclusively, with that grant's token, checked here when
// the entry is applied, so a holder that lost its lock (stolen, expired) is
// refused and nothing changes. A Record, once in the state, is never
// changed in place: a write replaces it, so that a reader (Query, a grant's
// event, a change) may keep the pointer or a copy.

// setRecord applies a SetRecord: validate, check the holder, write or
// delete, and with Release, release the lock as release does, in the same
// entry.
func (a *applier) setRecord(c *SetRecord) Result {
	if err := a.st.owns(c.Namespace); err != nil { // first (groups.go)
		return Result{Err: err}
	}
	lim := &a.st.limits
	if err := lim.checkRecord(c); err != nil {
		return Result{Err: err}
	}
	if err := lim.checkNamespace(c.Namespace); err != nil {
		return Result{Err: err}
	}
	s := a.st.sessions[c.Session]
	if s == nil || s.ns.name != c.Namespace {
		// A holder whose session ended lost its locks: refused as any
		// other non-holder, with the name's current token (another
		// namespace's session looks the same, SPEC §10).
		a.ns = a.st.namespaces[c.Namespace]
		return Result{Err: a.notHolder(c)}
	}
	a.ns = s.ns
	ns := a.ns
	r := a.st.requests[reqKey{s.id, c.RequestID}]
	if r == nil && c.Release {
		// A retried release with record that was applied: the request
		// finished released with this token (release's duplicate path).
		if o, ok := s.find(c.RequestID); ok && o.status == StatusReleased && o.token == c.Token {
			return Result{Status: StatusReleased, Token: o.token, Duplicate: true}
		}
	}
	var old *Record
	if ns.records != nil {
		old = ns.records[c.Name]
	}
	if !c.Delete {
		size := ns.recordBytes + recordSize(c.Name, c.Value)
		if old != nil {
			size -= recordSize(old.Name, old.Value)
		}
		if size > lim.MaxNamespaceRecordBytes {
			return Result{Err: errorf(CodeLimit, "the records of namespace %s would be %d bytes with the %d of %s, over the limit of %d", quote(ns.name), size, len(c.Value), quote(c.Name), lim.MaxNamespaceRecordBytes)}
		}
	}
	if r == nil || !r.held || r.mode != Exclusive || r.token != c.Token || !slices.Contains(r.names, c.Name) {
		return Result{Err: a.notHolder(c)}
	}
	s.ack(c.AckBelow)
	var res Result
	if c.Delete {
		if old != nil {
			ns.writeRecords()
			delete(ns.records, c.Name)
			ns.recordBytes -= recordSize(old.Name, old.Value)
			a.st.nRecords--
			if a.keep {
				a.recordChange(ChangeRecordDeleted, r, &Record{Name: c.Name, Token: c.Token, Time: a.time, Index: a.logical})
			}
		}
	} else {
		rec := &Record{Name: c.Name, Value: c.Value, Token: c.Token, Time: a.time, Index: a.logical}
		ns.writeRecords()
		if ns.records == nil {
			ns.records = make(map[string]*Record)
		}
		ns.records[c.Name] = rec
		ns.recordBytes += recordSize(rec.Name, rec.Value)
		if old != nil {
			ns.recordBytes -= recordSize(old.Name, old.Value)
		} else {
			a.st.nRecords++
		}
		a.recordChange(ChangeRecordSet, r, rec)
		res.Record = rec
	}
	if c.Release {
		rel := a.releaseHeld(r)
		rel.Record = res.Record
		return rel
	}
	res.Status, res.Token = StatusGranted, r.token
	return res
}

// recordSize is what a record counts against its namespace's limit.
func recordSize(name string, value []byte) int64 { return int64(len(name) + len(value)) }

// notHolder is the refusal of a record write by whoever does not hold the
// name exclusively with the token given: it names the current exclusive
// token (SPEC §12), which Error.Token carries too.
func (a *applier) notHolder(c *SetRecord) *Error {
	var cur uint64
	if a.ns != nil {
		if res := a.ns.resources[c.Name]; res != nil && len(res.holders) > 0 && res.holders[0].mode == Exclusive {
			cur = res.holders[0].token
		}
	}
	what := "write"
	if c.Delete {
		what = "delete"
	}
	holder := "nobody holds it exclusively"
	if cur != 0 {
		holder = "its current exclusive token is " + itoa(cur)
	}
	e := errorf(CodeNotHolder, "session %d (request %d) may not %s the record of %s with token %d: it does not hold the name exclusively with that token; %s", c.Session, c.RequestID, what, quote(c.Name), c.Token, holder)
	e.Token = cur
	return e
}

// writeRecords makes ns.records safe to change: while a snapshot is
// encoded, the first change after its point leaves the map as it was to
// the frozen namespace and goes on in a copy (cow.go).
func (ns *namespace) writeRecords() {
	if !ns.cow.on() {
		return
	}
	ns.cow.namespace(ns)
	if !ns.recCopied {
		ns.records = maps.Clone(ns.records)
		ns.recCopied = true
	}
}

// sortedRecords returns the records of ns that keep accepts (nil: all),
// sorted by name.
func sortedRecords(recs map[string]*Record, keep func(string) bool) []Record {
	if len(recs) == 0 {
		return nil
	}
	out := make([]Record, 0, len(recs))
	for name, rec := range recs {
		if keep == nil || keep(name) {
			out = append(out, *rec)
		}
	}
	slices.SortFunc(out, func(x, y Record) int { return strings.Compare(x.Name, y.Name) })
	return out
}

// Record returns the record of name in namespace ns, and the applied
// (logical) index it was read at; ok is false when the name has none.
func (m *Machine) Record(ns, name string) (rec Record, index uint64, ok bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	at := m.st.logical(m.st.lastIndex)
	if m.st.owns(ns) != nil { // as for an empty namespace (Owns)
		return Record{}, at, false
	}
	if n := m.st.namespaces[ns]; n != nil {
		if r := n.records[name]; r != nil {
			return *r, at, true
		}
	}
	return Record{}, at, false
}

// QueryMatching is Query restricted to the names match accepts (a held or
// pending line is kept when its name matches), with the records of every
// matching name of the namespace sorted by name, all at one applied
// (logical) index: a watch's snapshot. match nil accepts every name.
func (m *Machine) QueryMatching(ns string, match func(name string) bool) (q QueryResult, records []Record, index uint64) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	at := m.st.logical(m.st.lastIndex)
	n := m.st.namespaces[ns]
	if n == nil || m.st.owns(ns) != nil { // as for an empty namespace (Owns)
		return QueryResult{}, nil, at
	}
	q = query(n, match)
	return q, sortedRecords(n.records, match), at
}

// queryRecords returns the records of the names q reports, sorted by name,
// each once.
func queryRecords(n *namespace, q *QueryResult) []Record {
	if len(n.records) == 0 {
		return nil
	}
	var out []Record
	seen := make(map[string]bool)
	for _, lines := range [2][]LockInfo{q.Held, q.Pending} {
		for _, l := range lines {
			if seen[l.Name] {
				continue
			}
			seen[l.Name] = true
			if rec := n.records[l.Name]; rec != nil {
				out = append(out, *rec)
			}
		}
	}
	slices.SortFunc(out, func(x, y Record) int { return strings.Compare(x.Name, y.Name) })
	return out
}

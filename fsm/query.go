package fsm

import "sort"

// Query is spec §4.5 for one namespace, in SPEC §8's order: pending queue by
// queue in the order the queues were created, each in queue order (a scoped
// request appears in each of its queues); held in grant order, a scoped lock
// once per name. A namespace nobody uses answers empty, exactly like one
// that does not exist, and so does one whose slot this group does not
// serve (Owns says why).
func (m *Machine) Query(namespace string) QueryResult {
	m.mu.RLock()
	defer m.mu.RUnlock()
	ns := m.st.namespaces[namespace]
	if ns == nil || m.st.owns(namespace) != nil {
		return QueryResult{}
	}
	return query(ns, nil)
}

// query is Query of ns, restricted to the names match accepts (nil: all),
// with the records of the names it reports (SPEC §12).
func query(ns *namespace, match func(string) bool) QueryResult {
	var q QueryResult
	if match == nil {
		q.Pending = make([]LockInfo, 0, ns.nPending)
		q.Held = make([]LockInfo, 0, ns.nHeld)
	}
	for res := ns.queueHead; res != nil; res = res.qnext {
		if match != nil && !match(res.name) {
			continue
		}
		for w := res.qhead; w != nil; w = w.next {
			q.Pending = append(q.Pending, info(w.req, res.name))
		}
	}
	for r := ns.heldHead; r != nil; r = r.hnext {
		for _, n := range r.names {
			if match == nil || match(n) {
				q.Held = append(q.Held, info(r, n))
			}
		}
	}
	q.Records = queryRecords(ns, &q)
	return q
}

func info(r *request, name string) LockInfo {
	li := LockInfo{Name: name, Mode: r.mode, ClientID: r.sess.clientID, Label: r.sess.label, Session: r.sess.id, RequestID: r.id, RequestedAt: r.requestedAt, MaxHolders: r.maxHolders}
	if r.held {
		li.Token, li.AcquiredAt = r.token, r.acquiredAt
	}
	return li
}

// Sessions lists the live sessions sorted by id: what a new leader
// re-arms. The sessions of a slot this group does not serve (moving out)
// are left out: their deadlines are not this group's (groups.md §8.2).
func (m *Machine) Sessions() []SessionInfo {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]SessionInfo, 0, len(m.st.sessions))
	for _, s := range m.st.sessions {
		if m.st.ownsSession(s) != nil {
			continue
		}
		out = append(out, sessionInfo(s))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Session describes one live session.
func (m *Machine) Session(id uint64) (SessionInfo, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := m.st.sessions[id]
	if s == nil {
		return SessionInfo{}, false
	}
	return sessionInfo(s), true
}

func sessionInfo(s *session) SessionInfo {
	return SessionInfo{ID: s.id, Namespace: s.ns.name, ClientID: s.clientID, Label: s.label, TTL: s.ttl, openedAt: s.openedAt, eventSeq: s.eventSeq, held: int(s.nHeld), pending: int(s.nPending)}
}

// SessionRequests returns where every request a session still knows of
// stands: live ones in creation order, then remembered finished ones by id.
// With the session's eventSeq, it is what a client that lost its event
// stream needs to resynchronise. ok is false when the session is not open,
// or its slot is not served here (OwnsSession tells these apart).
func (m *Machine) SessionRequests(id uint64) (reqs []RequestState, eventSeq uint64, ok bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := m.st.sessions[id]
	if s == nil || m.st.ownsSession(s) != nil {
		return nil, 0, false
	}
	for r := s.liveHead; r != nil; r = r.snext {
		rs := RequestState{RequestID: r.id, Names: r.names, Mode: r.mode, Status: StatusQueued}
		if r.held {
			rs.Status, rs.Token, rs.AcquiredAt = StatusGranted, r.token, r.acquiredAt
		}
		reqs = append(reqs, rs)
	}
	for _, o := range s.finished {
		reqs = append(reqs, RequestState{RequestID: o.id, Status: o.status, Token: o.token, Cause: o.cause, Reason: o.reason})
	}
	return reqs, s.eventSeq, true
}

// Members returns the member directory sorted by id.
func (m *Machine) Members() []Member {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]Member, 0, len(m.st.members))
	for _, mb := range m.st.members {
		out = append(out, mb)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// NamespaceStat counts one namespace's sessions, held locks and pending
// requests.
type NamespaceStat struct {
	Name     string
	Sessions int
	Held     int
	Pending  int
}

// NamespaceStats counts every namespace, sorted by name.
func (m *Machine) NamespaceStats() []NamespaceStat {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]NamespaceStat, 0, len(m.st.namespaces))
	for _, ns := range m.st.namespaces {
		out = append(out, NamespaceStat{Name: ns.name, Sessions: int(ns.sessions), Held: ns.nHeld, Pending: ns.nPending})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

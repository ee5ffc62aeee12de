package fsm

import "time"

// Sessions are the spec's agents (SPEC §4). The leader decides when one
// expires; here an ExpireSession or CloseSession entry runs spec §2.6.

func (a *applier) openSession(c *OpenSession) Result {
	if err := a.st.owns(c.Namespace); err != nil { // first (groups.go)
		return Result{Err: err}
	}
	lim := &a.st.limits
	if err := lim.checkOpen(c); err != nil {
		return Result{Err: err}
	}
	ns := a.st.namespaces[c.Namespace]
	if ns != nil && lim.MaxSessionsPerNamespace > 0 && ns.sessions >= lim.MaxSessionsPerNamespace {
		return Result{Err: errorf(CodeLimit, "namespace %s has %d sessions, the limit", quote(c.Namespace), ns.sessions)}
	}
	if ns == nil {
		ns = a.st.newNamespace(c.Namespace)
		a.st.namespaces[c.Namespace] = ns
	}
	ns.sessions++
	s := &session{id: sessionID(a.st.group, a.index), ns: ns, clientID: c.ClientID, label: c.Label, ttl: c.TTL, openedAt: a.time, secret: c.SecretHash}
	if s.clientID == "" {
		s.clientID = itoa(s.id)
	}
	a.st.sessions[s.id] = s
	a.st.linkSession(s)
	return Result{Status: StatusOpened, Session: s.id, ClientID: s.clientID}
}

// closeSession ends a session at its client's request. Closing a session
// that is already gone succeeds and changes nothing.
func (a *applier) closeSession(c *CloseSession) Result {
	if err := a.st.owns(c.Namespace); err != nil { // first (groups.go)
		return Result{Err: err}
	}
	s, err := a.session(c.Session, c.Namespace)
	if err != nil {
		if err.Code == CodeSessionClosed {
			return Result{Status: StatusClosed, Session: c.Session, Duplicate: true}
		}
		return Result{Err: err}
	}
	a.end(s, CauseSessionClosed)
	return Result{Status: StatusClosed, Session: s.id}
}

func (a *applier) expireSession(c *ExpireSession) Result {
	s := a.st.sessions[c.Session]
	if s == nil {
		return Result{Status: StatusClosed, Session: c.Session, Duplicate: true}
	}
	if err := a.st.ownsSession(s); err != nil { // through its namespace (groups.go)
		return Result{Err: err}
	}
	a.ns = s.ns
	a.end(s, CauseSessionExpired)
	return Result{Status: StatusClosed, Session: s.id}
}

// end is spec §2.6: abort every pending request of the session, then
// release every lock it holds, each in creation order. The queues they
// leave are processed once at the end instead of after each step: the locks
// granted are the same (granting is confluent, see process), and none can go
// to the ending session, which has no request left by then.
func (a *applier) end(s *session, cause Cause) {
	// Every request of s makes one event, and each may let one waiter in.
	if need := 2*int(s.nHeld+s.nPending) + 1; cap(a.out)-len(a.out) < need {
		a.out = append(make([]Event, 0, len(a.out)+need), a.out...)
	}
	for r := s.liveHead; r != nil; r = r.snext {
		if !r.held {
			a.unqueue(r)
			a.emit(s, Event{Kind: EventAborted, RequestID: r.id, Names: r.names, Mode: r.mode, Cause: cause})
			a.change(ChangeAborted, r, 0, cause, "")
		}
	}
	for r := s.liveHead; r != nil; r = r.snext {
		if r.held {
			a.unhold(r)
			a.emit(s, Event{Kind: EventLockLost, RequestID: r.id, Names: r.names, Mode: r.mode, Token: r.token, Cause: cause})
			a.change(ChangeReleased, r, r.token, cause, "")
		}
	}
	for r := s.liveHead; r != nil; {
		next := r.snext
		a.st.cow.request(r)
		a.unslot(r)
		delete(a.st.requests, r.key())
		r.sprev, r.snext = nil, nil
		r = next
	}
	a.st.cow.session(s)
	s.liveHead, s.liveTail = nil, nil
	a.emit(s, Event{Kind: EventSessionEnded, Cause: cause})
	a.sessionEnded(s, cause)
	a.process()
	delete(a.st.sessions, s.id)
	a.st.unlinkSession(s)
	a.st.closed.add(tombstone{id: s.id, ns: s.ns.name, secret: s.secret})
	s.finished = nil
	ns := s.ns
	ns.sessions--
	if ns.sessions == 0 && len(ns.records) == 0 { // SPEC §12: records keep it
		delete(a.st.namespaces, ns.name)
	}
}

// dur formats nanoseconds for a message.
func dur(ns int64) string { return time.Duration(ns).String() }

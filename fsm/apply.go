package fsm

import "unicode/utf8"

// One small apply function per entry type. Each validates first and returns
// an error Result before changing anything.

func (a *applier) apply(cmd Command) Result {
	switch c := cmd.(type) {
	case *OpenSession:
		return a.openSession(c)
	case *CloseSession:
		return a.closeSession(c)
	case *ExpireSession:
		return a.expireSession(c)
	case *Request:
		return a.request(c)
	case *Release:
		return a.release(c)
	case *Abort:
		return a.abort(c)
	case *SetRecord:
		return a.setRecord(c)
	case *SetLimits:
		return a.setLimits(c)
	case *SetMember:
		return a.setMember(c)
	case *SetClusterSecret:
		return a.setClusterSecret(c)
	case *StartChanges:
		return a.startChanges()
	case *unknownEntry:
		return Result{Status: statusIgnored}
	case *SetGroup, *Freeze, *ImportChunk, *Import, *Reject, *Unfreeze, *Drop:
		res, _ := a.applyMove(cmd) // move_apply.go
		return res
	case nil:
		return Result{Err: errorf(CodeInvalid, "entry has no command")}
	}
	return Result{Err: errorf(CodeInvalid, "entry type %s is not applied by this version", cmd.Type())}
}

// session finds the live session id of namespace ns. A session of another
// namespace is reported exactly as a closed one: nothing is learnt about
// other namespaces (SPEC §10).
func (a *applier) session(id uint64, ns string) (*session, *Error) {
	if err := a.st.limits.checkNamespace(ns); err != nil {
		return nil, err
	}
	s := a.st.sessions[id]
	if s == nil || s.ns.name != ns {
		return nil, errorf(CodeSessionClosed, "session %d is not open in namespace %s (closed, expired or never opened)", id, quote(ns))
	}
	a.ns = s.ns
	return s, nil
}

// request is spec §4.1 step 2 (with SPEC §7 scopes and §6 retries).
func (a *applier) request(c *Request) Result {
	if err := a.st.owns(c.Namespace); err != nil { // first (groups.go)
		return Result{Err: err}
	}
	lim := &a.st.limits
	if err := lim.checkRequest(c); err != nil {
		return Result{Err: err}
	}
	s, err := a.session(c.Session, c.Namespace)
	if err != nil {
		return Result{Err: err}
	}
	if res, ok := a.duplicate(s, c.RequestID); ok {
		return res
	}
	if c.RequestID < s.floor {
		return Result{Err: errorf(CodeInvalid, "request id %d of session %d was already used: it is below the session's acknowledged floor %d", c.RequestID, s.id, s.floor)}
	}
	if c.Mode == Shared {
		if err := a.semaphoreConflict(c.Names, c.MaxHolders); err != nil {
			return Result{Err: err}
		}
	}
	// Every pending request may be granted later, so held and pending
	// together are bounded by the held limit: a session never holds more.
	if s.nHeld+s.nPending >= lim.MaxHeldPerSession {
		return Result{Err: errorf(CodeLimit, "session %d holds %d locks and waits for %d: the limit on held locks is %d", s.id, s.nHeld, s.nPending, lim.MaxHeldPerSession)}
	}
	queue := !c.Steal && !a.grantableNew(c.Names, c.Mode, c.MaxHolders)
	if queue && !c.IfAvailable && s.nPending >= lim.MaxPendingPerSession {
		return Result{Err: errorf(CodeLimit, "session %d has %d pending requests: the limit is %d", s.id, s.nPending, lim.MaxPendingPerSession)}
	}
	s.ack(c.AckBelow)
	r := &request{index: a.logical, id: c.RequestID, sess: s, names: c.Names, mode: c.Mode, signal: c.Signal, maxHolders: c.MaxHolders, requestedAt: a.time}
	a.own = r
	switch {
	case c.Steal: // step 2.4: steal, prepend, process: r is granted at once
		a.steal(r)
		a.admit(r)
		a.grant(r)
		a.process()
	case !queue: // enqueue + process would grant r at once
		a.admit(r)
		a.grant(r)
	case c.IfAvailable: // step 2.5.1: not grantable, never queued
		a.emit(s, Event{Kind: EventNotAvailable, RequestID: r.id, Names: r.names, Mode: r.mode, Reply: true})
		s.remember(lim.maxFinished, outcome{id: r.id, status: StatusNotAvailable})
		return Result{Status: StatusNotAvailable}
	default: // step 2.5.2; processing cannot grant what is not grantable
		a.admit(r)
		a.enqueue(r)
		return Result{Status: StatusQueued}
	}
	return Result{Status: StatusGranted, Token: r.token, AcquiredAt: r.acquiredAt, Records: a.ownRecords}
}

// admit makes r a live request of its session, with a slot per name.
func (a *applier) admit(r *request) {
	a.st.requests[r.key()] = r
	r.sess.pushLive(r)
	a.slots(r)
}

// release is spec §4.2 for the lock granted to a request. A repeated release
// succeeds and changes nothing.
func (a *applier) release(c *Release) Result {
	if err := a.st.owns(c.Namespace); err != nil { // first (groups.go)
		return Result{Err: err}
	}
	s, err := a.session(c.Session, c.Namespace)
	if err != nil {
		return Result{Err: err}
	}
	r := a.st.requests[reqKey{s.id, c.RequestID}]
	if r == nil {
		if o, ok := s.find(c.RequestID); ok {
			if c.Token != 0 && o.token != 0 && c.Token != o.token {
				return Result{Err: errorf(CodeInvalid, "token %d is not the token %d of request %d of session %d", c.Token, o.token, c.RequestID, s.id)}
			}
			return Result{Status: o.status, Token: o.token, Cause: o.cause, Reason: o.reason, Duplicate: true}
		}
		if c.RequestID != 0 && c.RequestID < s.floor {
			return Result{Status: StatusReleased, Token: c.Token, Duplicate: true}
		}
		return Result{Err: noLock(s.id, c.RequestID)}
	}
	if !r.held {
		return Result{Err: errorf(CodeInvalid, "request %d of session %d is queued, not held: abort it instead of releasing it", c.RequestID, s.id)}
	}
	if c.Token != 0 && c.Token != r.token {
		return Result{Err: errorf(CodeInvalid, "token %d is not the token %d of request %d of session %d", c.Token, r.token, c.RequestID, s.id)}
	}
	s.ack(c.AckBelow)
	return a.releaseHeld(r)
}

// releaseHeld is spec §4.2 steps 5–7 for the held request r: Release's,
// and a SetRecord's that releases.
func (a *applier) releaseHeld(r *request) Result {
	token := r.token
	a.unhold(r)
	a.change(ChangeReleased, r, token, causeNone, "")
	a.finish(r, outcome{status: StatusReleased, token: token})
	a.process()
	return Result{Status: StatusReleased, Token: token}
}

// abort is spec §4.3. When the grant won the race the lock is released at
// once and the request still ends aborted (SPEC §6, point (c)). An abort
// that arrives before its request leaves a record, so the request, should it
// arrive later, is answered aborted and never queued.
func (a *applier) abort(c *Abort) Result {
	if err := a.st.owns(c.Namespace); err != nil { // first (groups.go)
		return Result{Err: err}
	}
	lim := &a.st.limits
	if err := lim.checkAbort(c); err != nil {
		return Result{Err: err}
	}
	s, err := a.session(c.Session, c.Namespace)
	if err != nil {
		return Result{Err: err}
	}
	if res, ok := a.duplicate(s, c.RequestID); ok && res.Status != StatusGranted && res.Status != StatusQueued {
		return res
	}
	if c.RequestID < s.floor && a.st.requests[reqKey{s.id, c.RequestID}] == nil {
		return Result{Status: StatusAborted, Cause: CauseAborted, Duplicate: true}
	}
	s.ack(c.AckBelow)
	o := outcome{id: c.RequestID, status: StatusAborted, cause: CauseAborted, reason: c.Reason}
	ev := Event{Kind: EventAborted, RequestID: c.RequestID, Cause: CauseAborted, Reason: c.Reason}
	if r := a.st.requests[reqKey{s.id, c.RequestID}]; r != nil {
		if r.held {
			o.token = r.token
			a.unhold(r)
		} else {
			a.unqueue(r)
		}
		ev.Names, ev.Mode, ev.Token = r.names, r.mode, o.token
		a.change(ChangeAborted, r, o.token, CauseAborted, c.Reason)
		a.finish(r, o)
	} else {
		s.remember(lim.maxFinished, o)
	}
	a.emit(s, ev)
	a.process()
	return Result{Status: StatusAborted, Token: o.token, Cause: CauseAborted, Reason: c.Reason}
}

func (a *applier) setLimits(c *SetLimits) Result {
	if err := c.Limits.Validate(); err != nil {
		return Result{Err: err}
	}
	a.st.limits = c.Limits
	// A lowered maxFinished applies at once. Each session is trimmed on its
	// own, so the map's order does not matter. A session of a frozen slot
	// is left as it is (nothing in a frozen slot changes, so that its
	// export is the state at Freeze): the target trims it at Import, to
	// the limit in force there (move_apply.go).
	for _, s := range a.st.sessions {
		if a.st.ownsAll || a.st.owns(s.ns.name) == nil {
			s.trim(c.Limits.maxFinished)
		}
	}
	return Result{Status: statusOK}
}

func (a *applier) setMember(c *SetMember) Result {
	m := c.Member
	if m.ID == "" {
		return Result{Err: errorf(CodeInvalid, "member id is empty")}
	}
	for _, f := range [...]string{m.ID, m.RaftAddr, m.GRPCAddr, m.HTTPAddr} {
		if len(f) > 1024 || !utf8.ValidString(f) {
			return Result{Err: errorf(CodeInvalid, "member %s has a malformed field %s", quote(m.ID), quote(f))}
		}
	}
	if c.Remove {
		delete(a.st.members, m.ID)
	} else {
		a.st.members[m.ID] = m
	}
	return Result{Status: statusOK}
}

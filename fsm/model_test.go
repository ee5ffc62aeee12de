package fsm

import (
	"maps"
	"slices"
)

// model is a naive lock manager, written from the spec text (web locks
// §2.5, §2.6, §4.1–§4.5) and SPEC.md §4–§8, not from the Machine. It is the
// oracle of the property tests: small, brute force and slow on purpose.
// Per namespace: the held list in grant order and the queues in creation
// order. Retry bookkeeping (finished outcomes, the acknowledged floor)
// follows the doc comments of Request.AckBelow and Result.Duplicate.
type model struct {
	maxFinished int64 // Limits.maxFinished
	// Limits.MaxRecordBytes, MaxNamespaceRecordBytes (SPEC §12).
	maxRecord, maxNSRecords int64
	index                   uint64
	time                    int64
	sessions                map[uint64]*mSession
	ns                      map[string]*mNamespace
	events                  []Event  // of the entry being applied
	own                     *mReq    // the request the entry carries: its immediate outcome is a Reply
	changes                 []Change // of the entry being applied (SPEC §13)
}

type mReq struct {
	sess            *mSession
	id              uint64
	names           []string
	mode            Mode
	maxHolders      uint32 // SPEC §14
	held            bool
	token           uint64 // the index of the entry that granted it
	requestedAt, at int64
	records         []Record // what its grant carried
}

type mSession struct {
	id, floor, eventSeq uint64
	ns, clientID, label string
	ttl, openedAt       int64
	live                []*mReq // creation order
	finished            map[uint64]RequestState
}

type mQueue struct {
	name string
	reqs []*mReq
}
type mNamespace struct {
	name    string
	held    []*mReq   // grant order
	queues  []*mQueue // creation order; an emptied queue is dropped
	records map[string]Record
}

func newModel() *model {
	l := DefaultLimits()
	return &model{maxFinished: l.maxFinished, maxRecord: l.MaxRecordBytes, maxNSRecords: l.MaxNamespaceRecordBytes,
		sessions: map[uint64]*mSession{}, ns: map[string]*mNamespace{}}
}

func (m *model) namespace(name string) *mNamespace {
	if m.ns[name] == nil {
		m.ns[name] = &mNamespace{name: name, records: map[string]Record{}}
	}
	return m.ns[name]
}

// change notes a change about r (SPEC §13).
func (m *model) change(ns *mNamespace, k ChangeKind, r *mReq, token uint64, cause Cause, reason string) {
	m.changes = append(m.changes, Change{Kind: k, Namespace: ns.name, Names: r.names, Mode: r.mode, MaxHolders: r.maxHolders,
		Session: r.sess.id, RequestID: r.id, ClientID: r.sess.clientID, Label: r.sess.label, Token: token, Cause: cause, Reason: reason})
}

// semaphoreN is SPEC §14: the N the held and queued shared requests of
// name agree on, and whether there is any.
func (ns *mNamespace) semaphoreN(name string) (uint32, bool) {
	for _, h := range ns.held {
		if h.mode == Shared && slices.Contains(h.names, name) {
			return h.maxHolders, true
		}
	}
	for _, q := range ns.queues {
		if q.name == name {
			for _, r := range q.reqs {
				if r.mode == Shared {
					return r.maxHolders, true
				}
			}
		}
	}
	return 0, false
}

func (m *model) emit(s *mSession, e Event) {
	s.eventSeq++
	e.Session = s.id
	m.events = append(m.events, e)
}

// queue is spec §2.5 "get the lock request queue", SPEC §8: created at the
// end of the creation order when missing.
func (ns *mNamespace) queue(name string) *mQueue {
	for _, q := range ns.queues {
		if q.name == name {
			return q
		}
	}
	q := &mQueue{name: name}
	ns.queues = append(ns.queues, q)
	return q
}

// grantable is spec §2.5, for every name of the request (SPEC §7).
func (ns *mNamespace) grantable(r *mReq) bool {
	for _, name := range r.names {
		for _, q := range ns.queues {
			if q.name == name && len(q.reqs) > 0 && q.reqs[0] != r { // step 7
				return false
			}
		}
		holders := 0
		for _, h := range ns.held {
			if slices.Contains(h.names, name) && (r.mode == Exclusive || h.mode == Exclusive) { // steps 8, 9
				return false
			}
			if slices.Contains(h.names, name) {
				holders++
			}
		}
		if r.maxHolders > 0 && holders >= int(r.maxHolders) { // SPEC §14
			return false
		}
	}
	return true
}

// unqueue removes r from every queue and drops the queues it empties.
func (ns *mNamespace) unqueue(r *mReq) {
	var keep []*mQueue
	for _, q := range ns.queues {
		q.reqs = slices.DeleteFunc(q.reqs, func(x *mReq) bool { return x == r })
		if len(q.reqs) > 0 {
			keep = append(keep, q)
		}
	}
	ns.queues = keep
}

func (ns *mNamespace) unhold(r *mReq) {
	ns.held = slices.DeleteFunc(ns.held, func(x *mReq) bool { return x == r })
	r.held = false
}

// process is spec §4.4 over every queue until nothing changes: each queue,
// in creation order, grants its head while the head is grantable.
func (m *model) process(ns *mNamespace) {
	for changed := true; changed; {
		changed = false
		for _, q := range slices.Clone(ns.queues) {
			for len(q.reqs) > 0 && ns.grantable(q.reqs[0]) {
				r := q.reqs[0]
				ns.unqueue(r)
				r.held, r.token, r.at = true, m.index, m.time
				ns.held = append(ns.held, r)
				for _, n := range r.names { // SPEC §12
					if rec, ok := ns.records[n]; ok {
						r.records = append(r.records, rec)
					}
				}
				m.emit(r.sess, Event{Kind: EventGranted, RequestID: r.id, Names: r.names, Mode: r.mode, Token: r.token, AcquiredAt: r.at, Records: r.records, Reply: r == m.own})
				m.change(ns, ChangeGranted, r, r.token, causeNone, "")
				changed = true
			}
		}
	}
}

// remember records how request id ended, unless the client acknowledged it;
// past max outcomes the oldest is forgotten and the floor passes it.
func (s *mSession) remember(id uint64, o RequestState, max int64) {
	if o.RequestID = id; id >= s.floor {
		s.finished[id] = o
	}
	s.trim(max)
}

func (s *mSession) trim(max int64) {
	for int64(len(s.finished)) > max {
		oldest := slices.Min(slices.Collect(maps.Keys(s.finished)))
		delete(s.finished, oldest)
		s.floor = oldest + 1
	}
}

func (s *mSession) ack(below uint64) {
	if below > s.floor {
		s.floor = below
	}
	for id := range s.finished {
		if id < s.floor {
			delete(s.finished, id)
		}
	}
}

func (m *model) finish(r *mReq, o RequestState) {
	s := r.sess
	s.live = slices.DeleteFunc(s.live, func(x *mReq) bool { return x == r })
	s.remember(r.id, o, m.maxFinished)
}

func (s *mSession) liveReq(id uint64) *mReq {
	for _, r := range s.live {
		if r.id == id {
			return r
		}
	}
	return nil
}

func (m *model) lookup(id uint64, ns string) *mSession {
	if s := m.sessions[id]; s != nil && s.ns == ns {
		return s
	}
	return nil
}

func fail(c Code) Result { return Result{Err: &Error{Code: c}} }

func dupOf(o RequestState) Result {
	return Result{Status: o.Status, Token: o.Token, Cause: o.Cause, Reason: o.Reason, Duplicate: true}
}

// apply applies one entry; the Result's Err, when set, carries only a code
// (and, for CodeNotHolder, the token).
func (m *model) apply(index uint64, time int64, cmd Command) (Result, []Event) {
	m.index, m.time, m.events, m.changes = index, time, nil, nil
	var res Result
	switch c := cmd.(type) {
	case *OpenSession:
		s := &mSession{id: index, ns: c.Namespace, clientID: c.ClientID, label: c.Label, ttl: c.TTL, openedAt: time, finished: map[uint64]RequestState{}}
		if s.clientID == "" {
			s.clientID = itoa(index)
		}
		m.sessions[s.id] = s
		res = Result{Status: StatusOpened, Session: s.id, ClientID: s.clientID}
	case *CloseSession:
		res = m.end(m.lookup(c.Session, c.Namespace), c.Session, CauseSessionClosed)
	case *ExpireSession:
		res = m.end(m.sessions[c.Session], c.Session, CauseSessionExpired)
	case *Request:
		res = m.request(c)
	case *Release:
		res = m.release(c)
	case *Abort:
		res = m.abort(c)
	case *SetRecord:
		res = m.setRecord(c)
	case *SetLimits: // only maxFinished and the record limits differ from the defaults
		m.maxFinished = c.Limits.maxFinished
		m.maxRecord, m.maxNSRecords = c.Limits.MaxRecordBytes, c.Limits.MaxNamespaceRecordBytes
		for _, s := range m.sessions {
			s.trim(m.maxFinished)
		}
		res = Result{Status: statusOK}
	}
	return res, m.events
}

// request is spec §3.2.1 steps 6–8 and §4.1, with SPEC §6 retries.
func (m *model) request(c *Request) Result {
	if c.Steal && c.IfAvailable || c.Steal && c.Mode != Exclusive || c.Signal && (c.Steal || c.IfAvailable) || c.MaxHolders > 0 && c.Mode != Shared {
		return fail(CodeNotSupported)
	}
	s := m.lookup(c.Session, c.Namespace)
	if s == nil {
		return fail(CodeSessionClosed)
	}
	if r := s.liveReq(c.RequestID); r != nil {
		if r.held {
			// The records its names carry now: the grant's, unless the
			// holder wrote since (fsm/retry.go heldRecords).
			var recs []Record
			for _, n := range r.names {
				if rec, ok := m.ns[s.ns].records[n]; ok {
					recs = append(recs, rec)
				}
			}
			return Result{Status: StatusGranted, Token: r.token, AcquiredAt: r.at, Records: recs, Duplicate: true}
		}
		return Result{Status: StatusQueued, Duplicate: true}
	}
	if o, ok := s.finished[c.RequestID]; ok {
		return dupOf(o)
	}
	if c.RequestID < s.floor {
		return fail(CodeInvalid)
	}
	ns := m.namespace(s.ns)
	if c.Mode == Shared { // SPEC §14: every shared request of a name agrees on N
		for _, name := range c.Names {
			if n, ok := ns.semaphoreN(name); ok && n != c.MaxHolders {
				return fail(CodeNotSupported)
			}
		}
	}
	s.ack(c.AckBelow)
	r := &mReq{sess: s, id: c.RequestID, names: c.Names, mode: c.Mode, maxHolders: c.MaxHolders, requestedAt: m.time}
	m.own = r
	defer func() { m.own = nil }()
	if c.Steal { // step 2.4
		for _, name := range r.names {
			for _, h := range slices.Clone(ns.held) {
				if slices.Contains(h.names, name) {
					ns.unhold(h)
					m.emit(h.sess, Event{Kind: EventLockLost, RequestID: h.id, Names: h.names, Mode: h.mode, Token: h.token, Cause: CauseStolen})
					m.change(ns, ChangeStolen, h, h.token, CauseStolen, "")
					m.finish(h, RequestState{Status: StatusStolen, Cause: CauseStolen, Token: h.token})
				}
			}
			q := ns.queue(name)
			q.reqs = append([]*mReq{r}, q.reqs...)
		}
	} else {
		if c.IfAvailable && !ns.grantable(r) { // step 2.5.1
			m.emit(s, Event{Kind: EventNotAvailable, RequestID: r.id, Names: r.names, Mode: r.mode, Reply: true})
			s.remember(r.id, RequestState{Status: StatusNotAvailable}, m.maxFinished)
			return Result{Status: StatusNotAvailable}
		}
		for _, name := range r.names { // step 2.5.2
			q := ns.queue(name)
			q.reqs = append(q.reqs, r)
		}
	}
	s.live = append(s.live, r)
	m.process(ns) // step 2.6
	if r.held {
		return Result{Status: StatusGranted, Token: r.token, AcquiredAt: r.at, Records: r.records}
	}
	m.change(ns, ChangeQueued, r, 0, causeNone, "")
	return Result{Status: StatusQueued}
}

// release is spec §4.2; release is idempotent (SPEC §6).
func (m *model) release(c *Release) Result {
	s := m.lookup(c.Session, c.Namespace)
	if s == nil {
		return fail(CodeSessionClosed)
	}
	if r := s.liveReq(c.RequestID); r != nil {
		if !r.held || c.Token != 0 && c.Token != r.token {
			return fail(CodeInvalid)
		}
		s.ack(c.AckBelow)
		return m.releaseHeld(r)
	}
	if o, ok := s.finished[c.RequestID]; ok {
		if c.Token != 0 && o.Token != 0 && c.Token != o.Token {
			return fail(CodeInvalid)
		}
		return dupOf(o)
	}
	if c.RequestID != 0 && c.RequestID < s.floor {
		return Result{Status: StatusReleased, Token: c.Token, Duplicate: true}
	}
	return fail(CodeInvalid)
}

// releaseHeld is spec §4.2 steps 5–7 for a held request.
func (m *model) releaseHeld(r *mReq) Result {
	ns := m.namespace(r.sess.ns)
	ns.unhold(r)
	m.change(ns, ChangeReleased, r, r.token, causeNone, "")
	m.finish(r, RequestState{Status: StatusReleased, Token: r.token})
	m.process(ns)
	return Result{Status: StatusReleased, Token: r.token}
}

// setRecord is SPEC §12: only the exclusive holder of the name, with its
// grant's token, writes or deletes its record; with Release, the lock is
// released in the same entry.
func (m *model) setRecord(c *SetRecord) Result {
	if c.RequestID == 0 || c.Delete && len(c.Value) > 0 {
		return fail(CodeInvalid)
	}
	if int64(len(c.Value)) > m.maxRecord {
		return fail(CodeLimit)
	}
	ns := m.ns[c.Namespace]
	notHolder := func() Result {
		e := &Error{Code: CodeNotHolder}
		if ns != nil {
			for _, h := range ns.held {
				if h.mode == Exclusive && slices.Contains(h.names, c.Name) {
					e.Token = h.token
				}
			}
		}
		return Result{Err: e}
	}
	s := m.lookup(c.Session, c.Namespace)
	if s == nil {
		return notHolder()
	}
	r := s.liveReq(c.RequestID)
	if o, ok := s.finished[c.RequestID]; ok && r == nil && c.Release && o.Status == StatusReleased && o.Token == c.Token {
		return Result{Status: StatusReleased, Token: o.Token, Duplicate: true}
	}
	ns = m.namespace(s.ns)
	if !c.Delete {
		size := int64(len(c.Name) + len(c.Value))
		for n, rec := range ns.records {
			if n != c.Name {
				size += int64(len(n) + len(rec.Value))
			}
		}
		if size > m.maxNSRecords {
			return fail(CodeLimit)
		}
	}
	if r == nil || !r.held || r.mode != Exclusive || r.token != c.Token || !slices.Contains(r.names, c.Name) {
		return notHolder()
	}
	s.ack(c.AckBelow)
	var res Result
	if c.Delete {
		if _, ok := ns.records[c.Name]; ok {
			delete(ns.records, c.Name)
			m.change(ns, ChangeRecordDeleted, r, r.token, causeNone, "")
			m.changes[len(m.changes)-1].Record = &Record{Name: c.Name, Token: c.Token, Time: m.time, Index: m.index}
		}
	} else {
		rec := Record{Name: c.Name, Value: c.Value, Token: c.Token, Time: m.time, Index: m.index}
		ns.records[c.Name] = rec
		m.change(ns, ChangeRecordSet, r, r.token, causeNone, "")
		m.changes[len(m.changes)-1].Record = &rec
		res.Record = &rec
	}
	if c.Release {
		rel := m.releaseHeld(r)
		rel.Record = res.Record
		return rel
	}
	res.Status, res.Token = StatusGranted, r.token
	return res
}

// abort is spec §4.3, and SPEC §6 (c) when the grant won the race.
func (m *model) abort(c *Abort) Result {
	if c.RequestID == 0 {
		return fail(CodeInvalid)
	}
	s := m.lookup(c.Session, c.Namespace)
	if s == nil {
		return fail(CodeSessionClosed)
	}
	r := s.liveReq(c.RequestID)
	if o, ok := s.finished[c.RequestID]; ok && r == nil {
		return dupOf(o)
	}
	if r == nil && c.RequestID < s.floor {
		return Result{Status: StatusAborted, Cause: CauseAborted, Duplicate: true}
	}
	s.ack(c.AckBelow)
	ns := m.namespace(s.ns)
	o := RequestState{Status: StatusAborted, Cause: CauseAborted, Reason: c.Reason}
	ev := Event{Kind: EventAborted, RequestID: c.RequestID, Cause: CauseAborted, Reason: c.Reason}
	if r != nil {
		if r.held {
			o.Token = r.token
			ns.unhold(r)
		} else {
			ns.unqueue(r)
		}
		ev.Names, ev.Mode, ev.Token = r.names, r.mode, o.Token
		m.change(ns, ChangeAborted, r, o.Token, CauseAborted, c.Reason)
		m.finish(r, o)
	} else {
		s.remember(c.RequestID, o, m.maxFinished) // an abort that overtook its request
	}
	m.emit(s, ev)
	m.process(ns)
	return Result{Status: StatusAborted, Token: o.Token, Cause: CauseAborted, Reason: c.Reason}
}

// end is spec §2.6: abort every pending request of the agent, then release
// every lock it holds. The queues are processed after both steps, not
// between them, so that nothing is granted to the terminating agent; by
// §4.4 the other grants are the same either way.
func (m *model) end(s *mSession, id uint64, cause Cause) Result {
	if s == nil { // already gone: closing is idempotent
		return Result{Status: StatusClosed, Session: id, Duplicate: true}
	}
	ns := m.namespace(s.ns)
	for _, r := range s.live {
		if !r.held {
			ns.unqueue(r)
			m.emit(s, Event{Kind: EventAborted, RequestID: r.id, Names: r.names, Mode: r.mode, Cause: cause})
			m.change(ns, ChangeAborted, r, 0, cause, "")
		}
	}
	for _, r := range s.live {
		if r.held {
			ns.unhold(r)
			m.emit(s, Event{Kind: EventLockLost, RequestID: r.id, Names: r.names, Mode: r.mode, Token: r.token, Cause: cause})
			m.change(ns, ChangeReleased, r, r.token, cause, "")
		}
	}
	s.live = nil
	m.emit(s, Event{Kind: EventSessionEnded, Cause: cause})
	m.changes = append(m.changes, Change{Kind: ChangeSessionEnded, Namespace: ns.name, Session: s.id, ClientID: s.clientID, Label: s.label, Cause: cause})
	m.process(ns)
	delete(m.sessions, s.id)
	return Result{Status: StatusClosed, Session: id}
}

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
	index       uint64
	time        int64
	sessions    map[uint64]*mSession
	ns          map[string]*mNamespace
	events      []Event // of the entry being applied
	own         *mReq   // the request the entry carries: its immediate outcome is a Reply
}

type mReq struct {
	sess            *mSession
	id              uint64
	names           []string
	mode            Mode
	held            bool
	token           uint64 // the index of the entry that granted it
	requestedAt, at int64
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
	held   []*mReq   // grant order
	queues []*mQueue // creation order; an emptied queue is dropped
}

func newModel() *model {
	return &model{maxFinished: DefaultLimits().maxFinished, sessions: map[uint64]*mSession{}, ns: map[string]*mNamespace{}}
}

func (m *model) namespace(name string) *mNamespace {
	if m.ns[name] == nil {
		m.ns[name] = &mNamespace{}
	}
	return m.ns[name]
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
		for _, h := range ns.held {
			if slices.Contains(h.names, name) && (r.mode == Exclusive || h.mode == Exclusive) { // steps 8, 9
				return false
			}
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
				m.emit(r.sess, Event{Kind: EventGranted, RequestID: r.id, Names: r.names, Mode: r.mode, Token: r.token, AcquiredAt: r.at, Reply: r == m.own})
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

// apply applies one entry; the Result's Err, when set, carries only a code.
func (m *model) apply(index uint64, time int64, cmd Command) (Result, []Event) {
	m.index, m.time, m.events = index, time, nil
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
	case *SetLimits: // only maxFinished differs from the defaults
		m.maxFinished = c.Limits.maxFinished
		for _, s := range m.sessions {
			s.trim(m.maxFinished)
		}
		res = Result{Status: statusOK}
	}
	return res, m.events
}

// request is spec §3.2.1 steps 6–8 and §4.1, with SPEC §6 retries.
func (m *model) request(c *Request) Result {
	if c.Steal && c.IfAvailable || c.Steal && c.Mode != Exclusive || c.Signal && (c.Steal || c.IfAvailable) {
		return fail(CodeNotSupported)
	}
	s := m.lookup(c.Session, c.Namespace)
	if s == nil {
		return fail(CodeSessionClosed)
	}
	if r := s.liveReq(c.RequestID); r != nil {
		if r.held {
			return Result{Status: StatusGranted, Token: r.token, AcquiredAt: r.at, Duplicate: true}
		}
		return Result{Status: StatusQueued, Duplicate: true}
	}
	if o, ok := s.finished[c.RequestID]; ok {
		return dupOf(o)
	}
	if c.RequestID < s.floor {
		return fail(CodeInvalid)
	}
	s.ack(c.AckBelow)
	ns := m.namespace(s.ns)
	r := &mReq{sess: s, id: c.RequestID, names: c.Names, mode: c.Mode, requestedAt: m.time}
	m.own = r
	defer func() { m.own = nil }()
	if c.Steal { // step 2.4
		for _, name := range r.names {
			for _, h := range slices.Clone(ns.held) {
				if slices.Contains(h.names, name) {
					ns.unhold(h)
					m.emit(h.sess, Event{Kind: EventLockLost, RequestID: h.id, Names: h.names, Mode: h.mode, Token: h.token, Cause: CauseStolen})
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
		return Result{Status: StatusGranted, Token: r.token, AcquiredAt: r.at}
	}
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
		ns := m.namespace(s.ns)
		ns.unhold(r)
		m.finish(r, RequestState{Status: StatusReleased, Token: r.token})
		m.process(ns)
		return Result{Status: StatusReleased, Token: r.token}
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
		}
	}
	for _, r := range s.live {
		if r.held {
			ns.unhold(r)
			m.emit(s, Event{Kind: EventLockLost, RequestID: r.id, Names: r.names, Mode: r.mode, Token: r.token, Cause: cause})
		}
	}
	s.live = nil
	m.emit(s, Event{Kind: EventSessionEnded, Cause: cause})
	m.process(ns)
	delete(m.sessions, s.id)
	return Result{Status: StatusClosed, Session: id}
}

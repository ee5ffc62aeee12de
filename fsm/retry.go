package fsm

import "sort"

// Idempotent retries (SPEC §6, Raft dissertation §6.3). A session remembers
// how its recent requests ended, sorted by request id. The client says which
// outcomes it has (AckBelow): those are forgotten and their ids fall below
// the session's floor. Past maxFinished the oldest outcome is forgotten too.
// Memory follows what clients have not yet acknowledged, not history.

// remember records o; an id below the floor is not recorded (its outcome
// was acknowledged, so nobody will ask for it).
func (s *session) remember(max int64, o outcome) {
	if o.id < s.floor {
		return
	}
	s.ns.cow.session(s)
	i := sort.Search(len(s.finished), func(i int) bool { return s.finished[i].id >= o.id })
	if i < len(s.finished) && s.finished[i].id == o.id {
		s.finished[i] = o
		return
	}
	s.finished = append(s.finished, outcome{})
	copy(s.finished[i+1:], s.finished[i:])
	s.finished[i] = o
	s.trim(max)
}

// trim forgets the oldest outcomes beyond max.
func (s *session) trim(max int64) {
	if over := int64(len(s.finished)) - max; over > 0 {
		s.ns.cow.session(s)
		// Over the limit (which may just have been lowered): forget the
		// oldest outcomes and raise the floor past them.
		s.floor = s.finished[over-1].id + 1
		clear(s.finished[:over])
		s.finished = s.finished[over:]
	}
}

// find returns the recorded outcome of request id.
func (s *session) find(id uint64) (outcome, bool) {
	i := sort.Search(len(s.finished), func(i int) bool { return s.finished[i].id >= id })
	if i < len(s.finished) && s.finished[i].id == id {
		return s.finished[i], true
	}
	return outcome{}, false
}

// ack forgets the outcomes of request ids below ackBelow.
func (s *session) ack(ackBelow uint64) {
	if ackBelow <= s.floor {
		return
	}
	s.ns.cow.session(s)
	s.floor = ackBelow
	i := sort.Search(len(s.finished), func(i int) bool { return s.finished[i].id >= ackBelow })
	if i == 0 {
		return
	}
	n := copy(s.finished, s.finished[i:])
	clear(s.finished[n:])
	s.finished = s.finished[:n]
	if len(s.finished) == 0 {
		s.finished = nil
	}
}

// duplicate answers a repeated (session, request id) without changing
// anything: where the request stands now.
func (a *applier) duplicate(s *session, id uint64) (Result, bool) {
	if r := a.st.requests[reqKey{s.id, id}]; r != nil {
		if r.held {
			return Result{Status: StatusGranted, Token: r.token, AcquiredAt: r.acquiredAt, Records: heldRecords(r), Duplicate: true}, true
		}
		return Result{Status: StatusQueued, Duplicate: true}, true
	}
	if o, ok := s.find(id); ok {
		return Result{Status: o.status, Token: o.token, Cause: o.cause, Reason: o.reason, Duplicate: true}, true
	}
	return Result{}, false
}

// heldRecords are the records of a held request's names, for a retry of
// the request answered by duplicate: a client whose first answer was lost
// learns its grant from the retry, and must see the records its grant
// carried (SPEC §12), as the first answer had them. While r holds its
// names they are the same: only a name's exclusive holder writes its
// record, and that is r (or, while r holds shared, nobody) — unless r's
// own client has written since, having learned the grant from its
// session stream; then the answer has its own write, which is what the
// name carries now.
func heldRecords(r *request) []Record {
	ns := r.sess.ns
	if len(ns.records) == 0 {
		return nil
	}
	var recs []Record
	for _, n := range r.names {
		if rec := ns.records[n]; rec != nil {
			recs = append(recs, *rec)
		}
	}
	return recs
}

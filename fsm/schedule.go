package fsm

// The scheduling core: spec §2.5 (grantable), §4.1 (request), §4.2
// (release), §4.3 (abort) and §4.4 (process a queue), extended to scopes as
// SPEC §7 says. All of it runs inside one entry, on one namespace.

// applier carries one entry's context: its raw Raft index and its logical
// index (groups.go: the fencing token of what it grants, the index of a
// request or record it makes), its leader time, the events it emits and
// the work list of queues to process.
type applier struct {
	st      *state
	ns      *namespace
	index   uint64 // raw: a session's id
	logical uint64 // index + the group's offset: tokens and indexes
	time    int64
	out     []Event
	work    []*resource
	// own is the request the entry carries, when the entry decides it at
	// once: its event is marked Reply, and ownRecords are the records its
	// grant carried (Result.Records).
	own        *request
	ownRecords []Record
	// keep: collect the entry's changes (Machine.KeepChanges, change.go).
	keep    bool
	changes []Change
	// move: what a move entry changed (Applied.Move; move_apply.go).
	move *MoveApplied
}

func (a *applier) emit(s *session, e Event) {
	a.st.cow.session(s)
	s.eventSeq++
	e.Session, e.Seq = s.id, s.eventSeq
	a.out = append(a.out, e)
}

// resource gets a name's resource, creating it (the spec's "get the lock
// request queue", §2.5).
func (a *applier) resource(name string) *resource {
	res := a.ns.resources[name]
	if res == nil {
		res = &resource{name: name}
		a.ns.resources[name] = res
	}
	return res
}

// touch puts res on the work list: its queue must be processed before the
// entry ends.
func (a *applier) touch(res *resource) {
	if !res.inWork {
		res.inWork = true
		a.work = append(a.work, res)
	}
}

// grantable is spec §2.5 for a queued request, over every name of its
// scope: it heads every one of its queues (step 7) and no held lock
// conflicts on any of its names (steps 8, 9).
func grantable(r *request) bool {
	for i := range r.waiters {
		w := &r.waiters[i]
		if w.prev != nil || w.res.conflicts(r.mode, r.maxHolders) {
			return false
		}
	}
	return true
}

// grantableNew is spec §2.5 for a request not yet in any queue: every one of
// its queues is empty and no held lock conflicts (nor, for a semaphore of
// max holders, are there max of them).
func (a *applier) grantableNew(names []string, m Mode, max uint32) bool {
	for _, n := range names {
		if res := a.ns.resources[n]; res != nil && (res.qhead != nil || res.conflicts(m, max)) {
			return false
		}
	}
	return true
}

// process runs spec §4.4 on every queue of the work list until none has a
// grantable head: each queue is granted from its head and stops at the first
// request that is not grantable (SPEC point (a)). Granting a scoped request
// removes it from its other queues, whose heads then change, so those go on
// the work list too. The outcome does not depend on the order of the work
// list (two heads that could both be granted name disjoint resources); the
// order only fixes the order of events, and it is the same on every replica.
func (a *applier) process() {
	for i := 0; i < len(a.work); i++ {
		res := a.work[i]
		res.inWork = false
		for res.qhead != nil {
			r := res.qhead.req
			if !grantable(r) {
				break
			}
			a.unqueue(r)
			a.grant(r)
		}
		a.dropIfEmpty(res)
	}
	clear(a.work)
	a.work = a.work[:0]
}

// slots gives r one slot per name, each with the name's resource (created
// if need be): the resources r will queue on or hold. A shared request
// counts on each (SPEC §14: the name's semaphore size is its shared
// requests').
func (a *applier) slots(r *request) {
	if len(r.names) == 1 {
		r.waiters = r.w1[:1]
	} else {
		r.waiters = make([]waiter, len(r.names))
	}
	for i, n := range r.names {
		res := a.resource(n)
		r.waiters[i] = waiter{req: r, res: res}
		if r.mode == Shared {
			res.nShared++
			res.maxHolders = r.maxHolders
		}
	}
	if r.maxHolders > 0 {
		a.st.nSemaphores++
	}
}

// unslot undoes the counts of slots, for a request that ends.
func (a *applier) unslot(r *request) {
	if r.mode == Shared {
		for i := range r.waiters {
			r.waiters[i].res.nShared--
		}
	}
	if r.maxHolders > 0 {
		a.st.nSemaphores--
	}
}

// semaphoreConflict is SPEC §14's agreement: a shared request's
// maxHolders must be the N of every name's held and queued shared
// requests.
func (a *applier) semaphoreConflict(names []string, max uint32) *Error {
	for _, n := range names {
		if res := a.ns.resources[n]; res != nil && res.nShared > 0 && res.maxHolders != max {
			return errorf(CodeNotSupported, "name %s is a semaphore of %s: a shared request for it cannot ask for %s", quote(n), holdersOf(res.maxHolders), holdersOf(max))
		}
	}
	return nil
}

func holdersOf(n uint32) string {
	if n == 0 {
		return "unlimited holders (maxHolders 0)"
	}
	return "maxHolders " + itoa(uint64(n))
}

// grant adds r to the held lock set (spec §4.4 step 2.1.10) with this
// entry's logical index as its fencing token, and tells its session.
func (a *applier) grant(r *request) {
	c := a.st.cow
	c.request(r)
	c.namespace(a.ns)
	c.session(r.sess)
	r.held = true
	r.token = a.logical
	r.acquiredAt = a.time
	a.ns.pushHeld(r)
	for i := range r.waiters {
		res := r.waiters[i].res
		res.holders = append(res.holders, r)
	}
	a.ns.nHeld++
	r.sess.nHeld++
	a.st.nHeld++
	var recs []Record // SPEC §12: the new holder sees what its predecessor left
	if len(a.ns.records) > 0 {
		for _, n := range r.names {
			if rec := a.ns.records[n]; rec != nil {
				recs = append(recs, *rec)
			}
		}
		if r == a.own {
			a.ownRecords = recs
		}
	}
	a.emit(r.sess, Event{Kind: EventGranted, RequestID: r.id, Names: r.names, Mode: r.mode, Token: r.token, AcquiredAt: r.acquiredAt, Records: recs, Reply: r == a.own})
	a.change(ChangeGranted, r, r.token, causeNone, "")
}

// enqueue puts r at the end of the queue of every one of its names (spec
// §4.1 step 2.5.2, for a whole scope at once).
func (a *applier) enqueue(r *request) {
	a.st.cow.namespace(a.ns)
	a.st.cow.session(r.sess)
	for i := range r.waiters {
		a.ns.enqueue(&r.waiters[i])
	}
	a.ns.nPending++
	r.sess.nPending++
	a.st.nPending++
	a.change(ChangeQueued, r, 0, causeNone, "")
}

// unqueue removes r from every one of its queues (spec §4.3 step 6, §4.4
// step 2.1.1) and puts them on the work list: their heads may have changed.
func (a *applier) unqueue(r *request) {
	a.st.cow.namespace(a.ns)
	a.st.cow.session(r.sess)
	for i := range r.waiters {
		w := &r.waiters[i]
		a.ns.dequeue(w)
		a.touch(w.res)
	}
	a.ns.nPending--
	r.sess.nPending--
	a.st.nPending--
}

// unhold removes r from the held lock set (spec §4.2 step 6) and puts its
// queues on the work list (step 7).
func (a *applier) unhold(r *request) {
	c := a.st.cow
	c.request(r)
	c.namespace(a.ns)
	c.session(r.sess)
	a.ns.unlinkHeld(r)
	for k := range r.waiters {
		res := r.waiters[k].res
		for i, h := range res.holders {
			if h == r {
				copy(res.holders[i:], res.holders[i+1:])
				res.holders[len(res.holders)-1] = nil
				res.holders = res.holders[:len(res.holders)-1]
				break
			}
		}
		a.touch(res)
	}
	r.held = false
	a.ns.nHeld--
	r.sess.nHeld--
	a.st.nHeld--
}

// steal is spec §4.1 step 2.4.1 over every name of r's scope: every held
// lock naming one of them is removed from the held lock set, whole (a scoped
// lock is never partly held), and its session told it was stolen.
func (a *applier) steal(r *request) {
	for _, n := range r.names {
		res := a.ns.resources[n]
		if res == nil {
			continue
		}
		for len(res.holders) > 0 {
			h := res.holders[0]
			a.unhold(h)
			a.emit(h.sess, Event{Kind: EventLockLost, RequestID: h.id, Names: h.names, Mode: h.mode, Token: h.token, Cause: CauseStolen})
			a.change(ChangeStolen, h, h.token, CauseStolen, "")
			a.finish(h, outcome{status: StatusStolen, cause: CauseStolen, token: h.token})
		}
	}
}

func (a *applier) dropIfEmpty(res *resource) {
	if res.empty() && !res.inWork {
		delete(a.ns.resources, res.name)
	}
}

// finish forgets a live request and remembers how it ended, for retries.
func (a *applier) finish(r *request, o outcome) {
	a.unslot(r)
	delete(a.st.requests, r.key())
	r.sess.unlinkLive(r)
	o.id = r.id
	r.sess.remember(a.st.limits.maxFinished, o)
}

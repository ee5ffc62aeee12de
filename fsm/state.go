package fsm

// state is the whole replicated state. Only Apply and restore change it.
type state struct {
	lastIndex  uint64 // index of the last entry applied
	limits     Limits
	members    map[string]Member // the member directory, by id
	namespaces map[string]*namespace
	sessions   map[uint64]*session
	requests   map[reqKey]*request // every live (pending or held) request
	// The sessions in id order, which is the order they were opened in:
	// what a snapshot walks.
	sessHead, sessTail *session
	nHeld              int
	nPending           int
	// closed remembers the secret hashes of the sessions that ended last,
	// so that a client presenting the right secret for its ended session
	// learns that it ended, while any other caller is refused alike
	// whether the session exists or not.
	closed tombstones
	// clusterSecret proves a call comes from a member ("": none yet;
	// clustersecret.go).
	clusterSecret string
	// changesFrom: the raw index of the StartChanges applied, 0 before
	// (startchanges.go).
	changesFrom uint64
	cow         *cow // copy-on-write for the snapshot being encoded (cow.go)
	// nRecords counts the records of every namespace, nSemaphores the
	// live requests with a MaxHolders: while both are 0 (and the record
	// limits are the defaults) a snapshot is written in a format the
	// release before reads (snapFormat).
	nRecords    int
	nSemaphores int
	// The groups groundwork (groups.go): the group whose log this is, its
	// token offset (logical index = raw index + offset) and which slots it
	// serves; ownsAll caches "every slot owned", which keeps the
	// ownership check one load for group 0. ownLast is the last session
	// in id order whose id has the group's own prefix: where a local open
	// goes (linkSession).
	group   uint16
	offset  uint64
	ownsAll bool
	slots   [Slots]slotState
	ownLast *session
	// mv is the moves in progress (move_state.go): SetGroup, the frozen
	// slots' Freezes, the rejected epochs and the staged imports.
	mv moveState
}

type reqKey struct{ session, id uint64 }

// newState is the state of group 0: every slot owned at epoch 0
// (newGroupState makes the others).
func newState() *state {
	st := &state{
		limits:     DefaultLimits(),
		members:    make(map[string]Member),
		namespaces: make(map[string]*namespace),
		sessions:   make(map[uint64]*session),
		requests:   make(map[reqKey]*request),
		cow:        &cow{},
	}
	st.ownAllSlots()
	return st
}

// newNamespace makes an empty namespace of st.
func (st *state) newNamespace(name string) *namespace {
	return &namespace{name: name, resources: make(map[string]*resource), cow: st.cow}
}

// linkSession inserts s into the id order (groups.md §6.5). A session
// this group opens has the largest id of its own prefix, so it goes right
// after ownLast, before the sessions of higher groups' prefixes: O(1).
// With one group that is the tail, as it always was. Another id (a
// session of another group's prefix, or the first own one) is placed by a
// walk back from there past the larger ids: O(1) too for ids that come in
// ascending order (a restore, a merge of an import).
func (st *state) linkSession(s *session) {
	own := sessionGroup(s.id) == st.group
	after := st.sessTail
	if own && st.ownLast != nil {
		after = st.ownLast
	}
	for after != nil && after.id > s.id {
		after = after.older
	}
	st.linkAfter(after, s)
	if own && (st.ownLast == nil || s.id > st.ownLast.id) {
		st.ownLast = s
	}
}

// linkAfter links s right after after (nil: at the head), freezing the
// neighbours it relinks for copy-on-write. The caller keeps the id order.
func (st *state) linkAfter(after, s *session) {
	var before *session // s goes between after and before
	if after != nil {
		before = after.newer
	} else {
		before = st.sessHead
	}
	st.cow.session(after)
	st.cow.session(before)
	s.older, s.newer = after, before
	if after != nil {
		after.newer = s
	} else {
		st.sessHead = s
	}
	if before != nil {
		before.older = s
	} else {
		st.sessTail = s
	}
}

func (st *state) unlinkSession(s *session) {
	if s == st.ownLast {
		st.ownLast = nil
		if o := s.older; o != nil && sessionGroup(o.id) == st.group {
			st.ownLast = o
		}
	}
	st.cow.session(s)
	st.cow.session(s.older)
	st.cow.session(s.newer)
	if s.older != nil {
		s.older.newer = s.newer
	} else {
		st.sessHead = s.newer
	}
	if s.newer != nil {
		s.newer.older = s.older
	} else {
		st.sessTail = s.older
	}
	s.older, s.newer = nil, nil
}

// namespace is the spec's origin: its held lock set and its lock request
// queue map. It exists while it has live sessions or records (SPEC §12).
type namespace struct {
	name      string
	resources map[string]*resource // names with a holder or a queue
	// The held lock set in grant order: an intrusive list of requests.
	heldHead, heldTail *request
	// Non-empty queues in creation order.
	queueHead, queueTail *resource
	sessions             int64
	nHeld, nPending      int
	// records by name (apply_record.go). The map is copied on write while
	// a snapshot is encoded: the frozen namespace keeps the map as it was,
	// and recCopied says that records is already the copy (cow.go).
	records     map[string]*Record
	recordBytes int64 // the names and values of records
	recCopied   bool
	cow         *cow       // its state's
	frozen      *namespace // as it was when the snapshot began (cow.go)
}

// resource is one name of a namespace: the locks that hold it and its lock
// request queue. It exists while either is non-empty.
type resource struct {
	name    string
	holders []*request // held locks naming it, in grant order
	// The queue, an intrusive list of waiters (one per request and name).
	qhead, qtail *waiter
	// The namespace's list of non-empty queues.
	qprev, qnext *resource
	// inWork is true while the resource is on the entry's work list.
	inWork bool
	// nShared counts the shared requests that hold or wait for the name,
	// and maxHolders is the N they agree on (SPEC §14; 0: unlimited).
	nShared    int32
	maxHolders uint32
}

// waiter is a request's slot for one of its names: the name's resource, and
// while the request is pending, its place in that resource's queue.
type waiter struct {
	req        *request
	res        *resource
	prev, next *waiter
}

// request is a lock request, pending or held (then it is the spec's lock).
type request struct {
	index       uint64 // logical index of its Request entry (groups.go): unique
	id          uint64 // client's request id, unique within the session
	sess        *session
	names       []string
	mode        Mode
	signal      bool
	maxHolders  uint32 // a shared request's semaphore size (SPEC §14); 0: unlimited
	held        bool   // granted: the lock is held (the fields below are set)
	ord         uint32 // its position in the snapshot being encoded (snapMu)
	requestedAt int64
	// One slot per name, holding the name's resource, from admission on;
	// while pending, the slots are linked into the queues. One-name
	// requests use w1, saving an allocation.
	waiters []waiter
	w1      [1]waiter
	// While held.
	token      uint64
	acquiredAt int64
	hprev      *request // the namespace's held list
	hnext      *request
	// The session's live requests, in creation order.
	sprev, snext *request
	frozen       *request // as it was when the snapshot began (cow.go)
}

// session is the spec's agent.
type session struct {
	id       uint64
	ns       *namespace
	clientID string
	label    string
	ttl      int64
	openedAt int64
	secret   string // SHA-256 of its secret; "" for sessions from before secrets
	eventSeq uint64
	// Live requests in creation order.
	liveHead, liveTail *request
	nHeld, nPending    int64
	// Finished outcomes for retries, sorted by request id; ids below floor
	// have been acknowledged by the client (or forgotten) and are gone.
	finished []outcome
	floor    uint64
	// The state's sessions in id order.
	older, newer *session
	frozen       *session // as it was when the snapshot began (cow.go)
}

// outcome is how a finished request ended.
type outcome struct {
	id     uint64
	status Status
	cause  Cause
	token  uint64
	reason string
}

func (r *request) key() reqKey { return reqKey{r.sess.id, r.id} }

// linked reports whether w is in its resource's queue.
func (w *waiter) linked() bool { return w.prev != nil || w.res.qhead == w }

// conflicts reports whether a held lock on res keeps a request of mode m
// from being granted (spec §2.5 steps 8 and 9), or, for a shared request
// of a semaphore of n holders, whether it has n already (SPEC §14).
func (res *resource) conflicts(m Mode, n uint32) bool {
	if len(res.holders) == 0 {
		return false
	}
	return m == Exclusive || res.holders[0].mode == Exclusive || (n > 0 && len(res.holders) >= int(n))
}

func (res *resource) empty() bool { return len(res.holders) == 0 && res.qhead == nil }

// --- the namespace's held list -------------------------------------------

func (ns *namespace) pushHeld(r *request) {
	ns.cow.namespace(ns)
	ns.cow.request(r)
	ns.cow.request(ns.heldTail)
	r.hprev, r.hnext = ns.heldTail, nil
	if ns.heldTail != nil {
		ns.heldTail.hnext = r
	} else {
		ns.heldHead = r
	}
	ns.heldTail = r
}

func (ns *namespace) unlinkHeld(r *request) {
	ns.cow.namespace(ns)
	ns.cow.request(r)
	ns.cow.request(r.hprev)
	ns.cow.request(r.hnext)
	if r.hprev != nil {
		r.hprev.hnext = r.hnext
	} else {
		ns.heldHead = r.hnext
	}
	if r.hnext != nil {
		r.hnext.hprev = r.hprev
	} else {
		ns.heldTail = r.hprev
	}
	r.hprev, r.hnext = nil, nil
}

// --- queues ----------------------------------------------------------------

// enqueue appends w to its resource's queue; a queue that was empty is
// created anew at the end of the namespace's queue list.
func (ns *namespace) enqueue(w *waiter) {
	res := w.res
	if res.qhead == nil {
		ns.linkQueue(res)
	}
	ns.cow.resource(res)
	ns.cow.waiter(w)
	ns.cow.waiter(res.qtail)
	w.prev, w.next = res.qtail, nil
	if res.qtail != nil {
		res.qtail.next = w
	} else {
		res.qhead = w
	}
	res.qtail = w
}

// dequeue removes w from its queue; an emptied queue leaves the namespace's
// queue list.
func (ns *namespace) dequeue(w *waiter) {
	res := w.res
	ns.cow.resource(res)
	ns.cow.waiter(w)
	ns.cow.waiter(w.prev)
	ns.cow.waiter(w.next)
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		res.qhead = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		res.qtail = w.prev
	}
	w.prev, w.next = nil, nil
	if res.qhead == nil {
		ns.unlinkQueue(res)
	}
}

func (ns *namespace) linkQueue(res *resource) {
	ns.cow.namespace(ns)
	ns.cow.resource(res)
	ns.cow.resource(ns.queueTail)
	res.qprev, res.qnext = ns.queueTail, nil
	if ns.queueTail != nil {
		ns.queueTail.qnext = res
	} else {
		ns.queueHead = res
	}
	ns.queueTail = res
}

func (ns *namespace) unlinkQueue(res *resource) {
	ns.cow.namespace(ns)
	ns.cow.resource(res)
	ns.cow.resource(res.qprev)
	ns.cow.resource(res.qnext)
	if res.qprev != nil {
		res.qprev.qnext = res.qnext
	} else {
		ns.queueHead = res.qnext
	}
	if res.qnext != nil {
		res.qnext.qprev = res.qprev
	} else {
		ns.queueTail = res.qprev
	}
	res.qprev, res.qnext = nil, nil
}

// --- the session's live list ----------------------------------------------

func (s *session) pushLive(r *request) {
	c := s.ns.cow
	c.session(s)
	c.request(r)
	c.request(s.liveTail)
	r.sprev, r.snext = s.liveTail, nil
	if s.liveTail != nil {
		s.liveTail.snext = r
	} else {
		s.liveHead = r
	}
	s.liveTail = r
}

func (s *session) unlinkLive(r *request) {
	c := s.ns.cow
	c.session(s)
	c.request(r)
	c.request(r.sprev)
	c.request(r.snext)
	if r.sprev != nil {
		r.sprev.snext = r.snext
	} else {
		s.liveHead = r.snext
	}
	if r.snext != nil {
		r.snext.sprev = r.sprev
	} else {
		s.liveTail = r.sprev
	}
	r.sprev, r.snext = nil, nil
}

// queued reports whether r sits in any queue.
func (r *request) queued() bool {
	for i := range r.waiters {
		if r.waiters[i].linked() {
			return true
		}
	}
	return false
}

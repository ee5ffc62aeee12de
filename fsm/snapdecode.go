package fsm

import (
	"fmt"
	"math"
)

// decodeSessions reads the sessions with their live requests, and returns
// the requests in snapshot order. They are linked into their namespaces
// afterwards, by decodeNamespaces.
func decodeSessions(d *decoder, st *state) ([]*request, error) {
	all := make([]*request, 0, len(st.requests))
	n := d.count(8)
	var prev uint64
	for i := 0; i < n && d.err == nil; i++ {
		s := &session{id: d.uvarint()}
		nsName := d.str()
		s.clientID, s.label, s.ttl, s.openedAt = d.str(), d.str(), d.varint(), d.varint()
		if d.version >= 2 {
			s.secret = d.str()
		}
		s.eventSeq, s.floor = d.uvarint(), d.uvarint()
		if d.err != nil {
			break
		}
		if i > 0 && s.id <= prev {
			return nil, fmt.Errorf("fsm: snapshot sessions out of order at %d", s.id)
		}
		prev = s.id
		ns := st.namespaces[nsName]
		if ns == nil {
			ns = st.newNamespace(nsName)
			st.namespaces[nsName] = ns
		}
		ns.sessions++
		s.ns = ns
		st.sessions[s.id] = s
		st.linkSession(s)
		if k := d.count(5); k > 0 {
			s.finished = make([]outcome, k)
			for j := range s.finished {
				o := &s.finished[j]
				o.id, o.status, o.cause, o.token, o.reason = d.uvarint(), Status(d.byte1()), Cause(d.byte1()), d.uvarint(), d.str()
				if d.err == nil && j > 0 && o.id <= s.finished[j-1].id {
					return nil, fmt.Errorf("fsm: snapshot outcomes of session %d out of order", s.id)
				}
			}
		}
		k := d.count(10)
		for j := 0; j < k && d.err == nil; j++ {
			r := decodeRequestFields(d)
			r.sess = s
			if d.version >= 4 {
				n := d.uvarint()
				if d.err == nil && (n > math.MaxUint32 || (n > 0 && r.mode != Shared)) {
					return nil, fmt.Errorf("fsm: snapshot request %d of session %d has maxHolders %d in mode %s", r.id, s.id, n, r.mode)
				}
				r.maxHolders = uint32(n)
			}
			if d.err != nil {
				break
			}
			if len(r.names) == 0 || r.id == 0 {
				return nil, fmt.Errorf("fsm: snapshot request %d of session %d is malformed", r.id, s.id)
			}
			if _, dup := st.requests[r.key()]; dup {
				return nil, fmt.Errorf("fsm: snapshot has request %d of session %d twice", r.id, s.id)
			}
			st.requests[r.key()] = r
			all = append(all, r)
			s.pushLive(r)
			if r.held {
				s.nHeld++
			} else {
				s.nPending++
			}
		}
	}
	return all, nil
}

// decodeNamespaces reads each namespace's held set and queues and links the
// requests into them.
func decodeNamespaces(d *decoder, st *state, all []*request) error {
	var names uint64
	for _, r := range st.requests {
		names += uint64(len(r.names))
	}
	n := d.count(2)
	withSessions, listed := len(st.namespaces), 0
	if d.err == nil && (n < withSessions || (d.version < 4 && n != withSessions)) {
		return fmt.Errorf("fsm: snapshot has %d namespaces for sessions of %d", n, withSessions)
	}
	var prev string
	ref := func(ns *namespace) (*request, error) {
		i := d.uvarint()
		if d.err != nil {
			return nil, d.err
		}
		if i >= uint64(len(all)) || all[i].sess.ns != ns {
			return nil, fmt.Errorf("fsm: snapshot of namespace %s names request #%d, which it does not have", quote(ns.name), i)
		}
		return all[i], nil
	}
	for i := 0; i < n && d.err == nil; i++ {
		name := d.str()
		if d.version >= 4 && i > 0 && name <= prev && d.err == nil {
			return fmt.Errorf("fsm: snapshot namespaces out of order at %s", quote(name))
		}
		prev = name
		ns := st.namespaces[name]
		switch {
		case ns != nil:
			listed++
		case d.version >= 4: // records only: checked below
			ns = st.newNamespace(name)
			st.namespaces[name] = ns
		default:
			return fmt.Errorf("fsm: snapshot namespace %s has no session", quote(name))
		}
		// A size hint, bounded by the names the requests actually name.
		ns.resources = make(map[string]*resource, min(d.uvarint(), names))
		a := applier{st: st, ns: ns}
		for k := d.count(1); k > 0 && d.err == nil; k-- {
			r, err := ref(ns)
			if err != nil {
				return err
			}
			if !r.held || r.hprev != nil || ns.heldHead == r {
				return fmt.Errorf("fsm: snapshot held set of %s lists request %d of session %d wrongly", quote(name), r.id, r.sess.id)
			}
			ns.pushHeld(r)
			a.slots(r)
			for i := range r.waiters {
				res := r.waiters[i].res
				res.holders = append(res.holders, r)
			}
			ns.nHeld++
			st.nHeld++
		}
		for q := d.count(2); q > 0 && d.err == nil; q-- {
			res := a.resource(d.str())
			if res.qhead != nil {
				return fmt.Errorf("fsm: snapshot has the queue of %s twice", quote(res.name))
			}
			for k := d.count(1); k > 0 && d.err == nil; k-- {
				r, err := ref(ns)
				if err != nil {
					return err
				}
				if err := restoreWaiter(&a, r, res); err != nil {
					return err
				}
			}
		}
		if d.version >= 4 {
			if err := decodeRecords(d, st, ns); err != nil {
				return err
			}
		}
	}
	if d.err == nil && listed != withSessions {
		return fmt.Errorf("fsm: snapshot lists %d of the %d namespaces that have sessions", listed, withSessions)
	}
	return nil
}

// decodeRecords reads a namespace's records (format 4), by name.
func decodeRecords(d *decoder, st *state, ns *namespace) error {
	k := d.count(5)
	if k > 0 {
		ns.records = make(map[string]*Record, k)
	}
	for j := 0; j < k && d.err == nil; j++ {
		rec := &Record{Name: d.str(), Value: d.bytes(), Token: d.uvarint(), Time: d.varint(), Index: d.uvarint()}
		if d.err != nil {
			break
		}
		// rec.Index ≤ L(last index) is checkScheduling's: the offset
		// comes after the records (format 5).
		if rec.Token == 0 || rec.Token > rec.Index {
			return fmt.Errorf("fsm: snapshot record of %s in namespace %s has token %d and index %d (last index %d)", quote(rec.Name), quote(ns.name), rec.Token, rec.Index, st.lastIndex)
		}
		if j > 0 && d.err == nil {
			if _, dup := ns.records[rec.Name]; dup {
				return fmt.Errorf("fsm: snapshot has the record of %s twice in namespace %s", quote(rec.Name), quote(ns.name))
			}
		}
		ns.records[rec.Name] = rec
		ns.recordBytes += recordSize(rec.Name, rec.Value)
		st.nRecords++
	}
	if d.err == nil && ns.sessions == 0 && len(ns.records) == 0 {
		return fmt.Errorf("fsm: snapshot namespace %s has no session and no record", quote(ns.name))
	}
	return nil
}

func restoreWaiter(a *applier, r *request, res *resource) error {
	if r.held {
		return fmt.Errorf("fsm: snapshot queues held request %d of session %d", r.id, r.sess.id)
	}
	if r.waiters == nil {
		a.slots(r)
		a.ns.nPending++
	}
	for i := range r.waiters {
		w := &r.waiters[i]
		if w.res == res {
			if w.linked() {
				return fmt.Errorf("fsm: snapshot queues request %d of session %d twice on %s", r.id, r.sess.id, quote(res.name))
			}
			a.ns.enqueue(w)
			return nil
		}
	}
	return fmt.Errorf("fsm: snapshot queues request %d of session %d on %s, a name it does not request", r.id, r.sess.id, quote(res.name))
}

// checkRestored verifies what the encoding alone cannot: every held request
// is in its namespace's held set and every pending one in all its queues.
func checkRestored(st *state) error {
	for _, s := range st.sessions {
		for r := s.liveHead; r != nil; r = r.snext {
			if r.held {
				if r.hprev == nil && s.ns.heldHead != r {
					return fmt.Errorf("fsm: snapshot holds request %d of session %d outside the held set", r.id, s.id)
				}
				continue
			}
			for i := range r.waiters {
				if !r.waiters[i].linked() {
					return fmt.Errorf("fsm: snapshot request %d of session %d is missing from a queue", r.id, s.id)
				}
			}
			if len(r.waiters) == 0 {
				return fmt.Errorf("fsm: snapshot request %d of session %d is neither held nor queued", r.id, s.id)
			}
			st.nPending++
		}
		for _, o := range s.finished {
			if st.requests[reqKey{s.id, o.id}] != nil {
				return fmt.Errorf("fsm: snapshot request %d of session %d is both live and finished", o.id, s.id)
			}
		}
	}
	return checkScheduling(st)
}

// checkScheduling verifies the lock rules on a restored state: no
// conflicting holders, no grantable queue head, no token or id from the
// future. A snapshot that breaks them would make this replica diverge. It
// walks the held set and the queues, not the (larger) maps.
//
// The bounds are groups.md §6.6's: tokens and the indexes of requests and
// records are logical, at most L(last index) = last index + offset; a
// session id of the group's own prefix has its raw part at most the last
// index; one of another group's prefix (imported) cannot be bounded here,
// except in a state of the default group state (no format 5), where no
// session was imported and the whole id is bounded as before; a
// request's index is at least its session id's raw part (L ≥ raw in the
// opening group, and L only grows across moves). With group 0 and offset
// 0 these accept exactly what they accepted before the groups.
func checkScheduling(st *state) error {
	last := st.logical(st.lastIndex)
	foreignOK := !st.defaultGroups()
	for _, s := range st.sessions {
		raw := s.id & rawMask
		switch {
		case sessionGroup(s.id) == st.group:
			if raw > st.lastIndex {
				return fmt.Errorf("fsm: snapshot session %d is newer than its last index %d", s.id, st.lastIndex)
			}
		case !foreignOK && s.id > st.lastIndex:
			return fmt.Errorf("fsm: snapshot session %d is newer than its last index %d", s.id, st.lastIndex)
		case !foreignOK:
			raw = s.id // group 0's check, as before
		}
		for r := s.liveHead; r != nil; r = r.snext {
			if r.index > last || r.index < raw {
				return fmt.Errorf("fsm: snapshot request %d of session %d has index %d outside [%d, %d]", r.id, s.id, r.index, raw, last)
			}
		}
	}
	for _, ns := range st.namespaces {
		for _, rec := range ns.records {
			if rec.Index > last {
				return fmt.Errorf("fsm: snapshot record of %s in namespace %s has token %d and index %d (last index %d)", quote(rec.Name), quote(ns.name), rec.Token, rec.Index, last)
			}
		}
		for _, res := range ns.resources {
			if err := checkSemaphore(ns, res); err != nil {
				return err
			}
		}
		for r := ns.heldHead; r != nil; r = r.hnext {
			if r.index > last || r.token > last || r.token == 0 {
				return fmt.Errorf("fsm: snapshot request %d of session %d has index %d, token %d past last index %d", r.id, r.sess.id, r.index, r.token, last)
			}
			for i := range r.waiters {
				res := r.waiters[i].res
				if len(res.holders) > 1 && (r.mode == Exclusive || res.holders[0].mode == Exclusive) {
					return fmt.Errorf("fsm: snapshot holders of %s in namespace %s conflict", quote(res.name), quote(ns.name))
				}
			}
			if r.hprev != nil && r.token < r.hprev.token {
				return fmt.Errorf("fsm: snapshot held set of namespace %s is out of grant order", quote(ns.name))
			}
		}
		for res := ns.queueHead; res != nil; res = res.qnext {
			if r := res.qhead.req; r.index > last || grantable(r) {
				return fmt.Errorf("fsm: snapshot queue of %s in namespace %s has a grantable or future head", quote(res.name), quote(ns.name))
			}
		}
	}
	return nil
}

// checkSemaphore verifies SPEC §14 on a restored name: its shared
// requests, held or queued, agree on N, and no more than N hold it.
func checkSemaphore(ns *namespace, res *resource) error {
	bad := func() error {
		return fmt.Errorf("fsm: snapshot shared requests of %s in namespace %s disagree on maxHolders, or exceed it", quote(res.name), quote(ns.name))
	}
	for _, h := range res.holders {
		if h.mode == Shared && h.maxHolders != res.maxHolders {
			return bad()
		}
	}
	if res.maxHolders > 0 && len(res.holders) > int(res.maxHolders) {
		return bad()
	}
	for w := res.qhead; w != nil; w = w.next {
		if w.req.mode == Shared && w.req.maxHolders != res.maxHolders {
			return bad()
		}
	}
	return nil
}

// decodeRequestFields reads a request's fields up to its acquired-at time,
// as a snapshot and a slot's export (move_stage.go) both write them.
func decodeRequestFields(d *decoder) *request {
	r := &request{id: d.uvarint(), index: d.uvarint()}
	if n := d.count(1); n > 0 {
		r.names = make([]string, n)
		for x := range r.names {
			r.names[x] = d.str()
		}
	}
	r.mode, r.signal, r.requestedAt = Mode(d.byte1()), d.bool1(), d.varint()
	r.held, r.token, r.acquiredAt = d.bool1(), d.uvarint(), d.varint()
	return r
}

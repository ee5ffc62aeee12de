package fsm

import "slices"

// Copy-on-write for snapshots. A snapshot is the state at one index, but
// encoding a million locks takes a few hundred milliseconds, and entries
// must go on being applied meanwhile. So BeginSnapshot only marks the point
// (under the write lock, in O(namespaces)), and the encoder then walks the
// state in short chunks under the read lock while Apply runs between them.
// Before Apply changes an object of the state for the first time after
// that point, it keeps a copy of it as it was (the object's frozen field;
// for resources, an entry in cow.ress); the encoder reads every object
// through view, which is that copy when
// there is one and the live object otherwise. An object without a copy has
// not been changed since the point, so either way the encoder sees the
// state at the point. Objects created after the point are never reached
// from it: linking one in changes an older object, whose copy does not
// point to it.
//
// What is copied is what the encoder reads:
//   - session: every field (finished is copied deeply: it changes in place);
//   - request: every field, with its own copy of the waiters (their queue
//     links change in place);
//   - resource: its queue and queue-list links (holders, inWork and the
//     other bookkeeping are not read by the encoder and not protected);
//   - namespace: its held list, queue list and counters, and its records:
//     the frozen copy keeps the records map, which the first write after
//     the point replaces with a copy (namespace.writeRecords; a Record
//     itself is never changed in place). The number of
//     resources, the namespace set, the member directory, the tombstones and
//     the state's totals are captured by BeginSnapshot itself.
//
// The rule for whoever changes this package: every write to a field listed
// above goes after a freeze of its object (the freeze methods below, or the
// list helpers in state.go, which freeze what they relink). TestSnapshotCOW
// encodes while applying random entries between every object the encoder
// visits, and compares with a snapshot taken with nothing applied.
//
// The copies are dropped (frozen set to nil, cow.ress emptied) when the
// encoding ends, under the write lock, so outside a snapshot there is no
// copy, and a copy always belongs to the snapshot in progress. One snapshot is
// encoded at a time (Machine.snapMu).

// cow is a state's copy-on-write bookkeeping: whether a snapshot is being
// encoded, and the objects frozen for it. Every namespace points to its
// state's cow, so the list helpers reach it without an applier.
type cow struct {
	active bool
	reqs   []*request
	sess   []*session
	// Resources are many and rarely change during a snapshot (only those
	// with a queue are read), so their copies live here, not in a field.
	ress map[*resource]*resource
	nss  []*namespace
}

// thaw drops every copy; the snapshot is over.
func (c *cow) thaw() {
	for _, r := range c.reqs {
		r.frozen = nil
	}
	for _, s := range c.sess {
		s.frozen = nil
	}
	for _, n := range c.nss {
		n.frozen = nil
		n.recCopied = false
	}
	clear(c.reqs)
	clear(c.sess)
	clear(c.ress)
	clear(c.nss)
	c.reqs, c.sess, c.nss = c.reqs[:0], c.sess[:0], c.nss[:0]
	c.active = false
}

func (c *cow) on() bool { return c != nil && c.active }

// The freeze methods (request, session, resource, namespace, waiter) keep
// an object as it is now, if a snapshot is being encoded and the object has
// no copy yet. Each may be called with nil.
func (c *cow) request(r *request) {
	if r == nil || r.frozen != nil || !c.on() {
		return
	}
	f := *r
	if len(r.waiters) == 1 {
		f.waiters = f.w1[:1]
	} else {
		f.waiters = slices.Clone(r.waiters)
	}
	r.frozen = &f
	c.reqs = append(c.reqs, r)
}

func (c *cow) session(s *session) {
	if s == nil || s.frozen != nil || !c.on() {
		return
	}
	f := *s
	f.finished = slices.Clone(s.finished)
	s.frozen = &f
	c.sess = append(c.sess, s)
}

func (c *cow) resource(res *resource) {
	if res == nil || !c.on() {
		return
	}
	if _, ok := c.ress[res]; ok {
		return
	}
	if c.ress == nil {
		c.ress = make(map[*resource]*resource)
	}
	f := *res
	c.ress[res] = &f
}

func (c *cow) namespace(ns *namespace) {
	if ns == nil || ns.frozen != nil || !c.on() {
		return
	}
	f := *ns
	ns.frozen = &f
	c.nss = append(c.nss, ns)
}

// waiter freezes the request w belongs to (its waiters are copied with it).
func (c *cow) waiter(w *waiter) {
	if w != nil {
		c.request(w.req)
	}
}

// The views: an object as it was when the snapshot began. The encoder
// calls them under the read lock, and again after every yield.

func (r *request) view() *request {
	if r.frozen != nil {
		return r.frozen
	}
	return r
}

func (s *session) view() *session {
	if s.frozen != nil {
		return s.frozen
	}
	return s
}

func (c *cow) resourceView(res *resource) *resource {
	if f := c.ress[res]; f != nil {
		return f
	}
	return res
}

func (ns *namespace) view() *namespace {
	if ns.frozen != nil {
		return ns.frozen
	}
	return ns
}

func (w *waiter) view() *waiter {
	f := w.req.frozen
	if f == nil {
		return w
	}
	for i := range w.req.waiters {
		if &w.req.waiters[i] == w {
			return &f.waiters[i]
		}
	}
	panic("fsm: a waiter is not among its request's waiters")
}

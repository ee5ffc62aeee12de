package fsm

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// The chunks of an export, and the staging of an import (groups.md §12.2,
// §12.3). A chunk is a run of tagged objects; an export is its chunks in
// seq order, and the objects, in this order:
//
//	the slots' sessions in id order, each followed by its live requests in
//	    creation order;
//	each namespace by name: the namespace, its held set in grant order,
//	    its queues in creation order (one waiter object per place), its
//	    records by name;
//	the slots' tombstones copied at Freeze, oldest first.
//
// The staging decodes each chunk, in order, into objects of their own
// (namespaces without the state's copy-on-write), which nothing reaches
// until Import: every lookup passes the ownership check first, and the
// staged objects are in none of the state's maps. A staged object refers
// only to staged objects. A snapshot keeps a stage as its chunks' bytes,
// and a restore decodes them again.

// The object tags.
const (
	tagNamespace = 1 + iota // name: the namespace the objects below are of
	tagSession              // a session (the snapshot's fields)
	tagRequest              // a live request of a session: session id, then the snapshot's fields
	tagHeld                 // the namespace's next held request: session id, request id
	tagWaiter               // the next place of a queue: name, session id, request id
	tagRecord               // a record of the namespace (the snapshot's fields)
	tagTombstone            // id, namespace, secret hash
)

// ChunkObjects and ChunkBytes bound an export's chunks (groups.md §12.3):
// a chunk is cut before the object that would make it more than
// ChunkObjects objects or ChunkBytes bytes (an object bigger than that
// goes alone).
const (
	ChunkObjects = 2048
	ChunkBytes   = 1 << 20
)

// stage is one import in progress: its chunks, and the objects decoded
// from them.
type stage struct {
	slots  []uint16
	set    slotSet
	epoch  uint32
	chunks [][]byte // by seq; never changed in place (a snapshot shares them)

	sessions []*session // in the order decoded (the export's: id order)
	byID     map[uint64]*session
	requests map[reqKey]*request
	spaces   map[string]*namespace
	names    []string // the namespaces in the order first seen
	tombs    []tombstone
	cur      *namespace // the namespace of the last tagNamespace
	nHeld    int
	nPending int
}

func newStage(slots []uint16, epoch uint32) *stage {
	return &stage{slots: slots, set: setOf(slots), epoch: epoch, byID: map[uint64]*session{},
		requests: map[reqKey]*request{}, spaces: map[string]*namespace{}}
}

// chunkSum is the SHA-256 of an export's chunks: each chunk's length, as
// a uvarint, then its bytes, in seq order.
func chunkSum(chunks [][]byte) [32]byte {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for _, c := range chunks {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(c)))])
		h.Write(c)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// add decodes chunk b as the stage's next one. On an error the stage
// holds what it held before: it is rebuilt from its chunks (only a
// corrupt or foreign chunk fails, so the cost does not matter).
func (sg *stage) add(b []byte) error {
	if err := sg.decode(b); err != nil {
		fresh := newStage(sg.slots, sg.epoch)
		for _, c := range sg.chunks {
			if fresh.decode(c) != nil {
				panic("fsm: a staged chunk no longer decodes")
			}
			fresh.chunks = append(fresh.chunks, c)
		}
		*sg = *fresh
		return err
	}
	sg.chunks = append(sg.chunks, b)
	return nil
}

func (sg *stage) namespace(name string) (*namespace, error) {
	if !sg.set.has(name) {
		return nil, fmt.Errorf("namespace %s is on slot %d, not one of the import's", quote(name), Slot(name))
	}
	ns := sg.spaces[name]
	if ns == nil {
		ns = &namespace{name: name, resources: make(map[string]*resource)}
		sg.spaces[name] = ns
		sg.names = append(sg.names, name)
	}
	return ns, nil
}

func (sg *stage) request(d *decoder, ns *namespace) (*request, error) {
	sid, id := d.uvarint(), d.uvarint()
	if d.err != nil {
		return nil, d.err
	}
	r := sg.requests[reqKey{sid, id}]
	if r == nil || (ns != nil && r.sess.ns != ns) {
		return nil, fmt.Errorf("request %d of session %d is not a staged request of this namespace", id, sid)
	}
	return r, nil
}

// slotsOf gives a staged request its waiters (the applier's slots,
// without the state's counters, which Import adds).
func slotsOf(ns *namespace, r *request) {
	if len(r.names) == 1 {
		r.waiters = r.w1[:1]
	} else {
		r.waiters = make([]waiter, len(r.names))
	}
	for i, n := range r.names {
		res := ns.resources[n]
		if res == nil {
			res = &resource{name: n}
			ns.resources[n] = res
		}
		r.waiters[i] = waiter{req: r, res: res}
		if r.mode == Shared {
			res.nShared++
			res.maxHolders = r.maxHolders
		}
	}
}

// decode reads one chunk's objects into the stage.
func (sg *stage) decode(b []byte) error {
	d := &decoder{b: b, version: snapVersion}
	for len(d.b) > 0 && d.err == nil {
		if err := sg.object(d); err != nil {
			return err
		}
	}
	if d.err != nil {
		return d.err
	}
	return nil
}

func (sg *stage) object(d *decoder) error {
	switch tag := d.byte1(); tag {
	case tagNamespace:
		name := d.str()
		if d.err != nil {
			return d.err
		}
		ns, err := sg.namespace(name)
		if err != nil {
			return err
		}
		sg.cur = ns
	case tagSession:
		s := &session{id: d.uvarint()}
		nsName := d.str()
		s.clientID, s.label, s.ttl, s.openedAt, s.secret = d.str(), d.str(), d.varint(), d.varint(), d.str()
		s.eventSeq, s.floor = d.uvarint(), d.uvarint()
		if k := d.count(5); k > 0 {
			s.finished = make([]outcome, k)
			for j := range s.finished {
				o := &s.finished[j]
				o.id, o.status, o.cause, o.token, o.reason = d.uvarint(), Status(d.byte1()), Cause(d.byte1()), d.uvarint(), d.str()
				if d.err == nil && j > 0 && o.id <= s.finished[j-1].id {
					return fmt.Errorf("outcomes of session %d out of order", s.id)
				}
			}
		}
		if d.err != nil {
			return d.err
		}
		if sg.byID[s.id] != nil || s.id&rawMask == 0 {
			return fmt.Errorf("session %d is staged twice, or malformed", s.id)
		}
		if n := len(sg.sessions); n > 0 && sg.sessions[n-1].id > s.id {
			return fmt.Errorf("sessions out of order at %d", s.id)
		}
		ns, err := sg.namespace(nsName)
		if err != nil {
			return err
		}
		ns.sessions++
		s.ns = ns
		sg.byID[s.id] = s
		sg.sessions = append(sg.sessions, s)
	case tagRequest:
		s := sg.byID[d.uvarint()]
		r := decodeRequestFields(d)
		n := d.uvarint()
		if d.err != nil {
			return d.err
		}
		if s == nil {
			return fmt.Errorf("request %d of a session not staged", r.id)
		}
		r.sess = s
		if n > math.MaxUint32 || (n > 0 && r.mode != Shared) || r.mode > Shared || len(r.names) == 0 || r.id == 0 ||
			r.index < s.id&rawMask || r.held != (r.token != 0) {
			return fmt.Errorf("request %d of session %d is malformed", r.id, s.id)
		}
		r.maxHolders = uint32(n)
		if sg.requests[r.key()] != nil {
			return fmt.Errorf("request %d of session %d is staged twice", r.id, s.id)
		}
		if _, done := s.find(r.id); done {
			return fmt.Errorf("request %d of session %d is both live and finished", r.id, s.id)
		}
		sg.requests[r.key()] = r
		s.pushLive(r)
		if r.held {
			s.nHeld++
		} else {
			s.nPending++
		}
	case tagHeld:
		ns := sg.cur
		if ns == nil {
			return fmt.Errorf("a held lock before any namespace")
		}
		r, err := sg.request(d, ns)
		if err != nil {
			return err
		}
		if !r.held || r.hprev != nil || ns.heldHead == r {
			return fmt.Errorf("held set of %s lists request %d of session %d wrongly", quote(ns.name), r.id, r.sess.id)
		}
		if t := ns.heldTail; t != nil && t.token > r.token {
			return fmt.Errorf("held set of %s is out of grant order", quote(ns.name))
		}
		ns.pushHeld(r)
		slotsOf(ns, r)
		for i := range r.waiters {
			res := r.waiters[i].res
			if len(res.holders) > 0 && (r.mode == Exclusive || res.holders[0].mode == Exclusive) {
				return fmt.Errorf("holders of %s in namespace %s conflict", quote(res.name), quote(ns.name))
			}
			res.holders = append(res.holders, r)
		}
		ns.nHeld++
		sg.nHeld++
	case tagWaiter:
		ns := sg.cur
		name := d.str()
		if d.err != nil {
			return d.err
		}
		if ns == nil {
			return fmt.Errorf("a queue before any namespace")
		}
		r, err := sg.request(d, ns)
		if err != nil {
			return err
		}
		if r.held {
			return fmt.Errorf("queues held request %d of session %d", r.id, r.sess.id)
		}
		if r.waiters == nil {
			slotsOf(ns, r)
			ns.nPending++
			sg.nPending++
		}
		i := slices.Index(r.names, name)
		if i < 0 || r.waiters[i].linked() {
			return fmt.Errorf("queues request %d of session %d on %s wrongly", r.id, r.sess.id, quote(name))
		}
		ns.enqueue(&r.waiters[i])
	case tagRecord:
		ns := sg.cur
		rec := &Record{Name: d.str(), Value: d.bytes(), Token: d.uvarint(), Time: d.varint(), Index: d.uvarint()}
		if d.err != nil {
			return d.err
		}
		if ns == nil || rec.Token == 0 || rec.Token > rec.Index || ns.records[rec.Name] != nil {
			return fmt.Errorf("record of %s is malformed or twice", quote(rec.Name))
		}
		if ns.records == nil {
			ns.records = make(map[string]*Record)
		}
		ns.records[rec.Name] = rec
		ns.recordBytes += recordSize(rec.Name, rec.Value)
	case tagTombstone:
		t := tombstone{id: d.uvarint(), ns: d.str(), secret: d.str()}
		if d.err != nil {
			return d.err
		}
		if t.secret == "" || !sg.set.has(t.ns) || sg.byID[t.id] != nil {
			return fmt.Errorf("tombstone of session %d is malformed", t.id)
		}
		sg.tombs = append(sg.tombs, t)
	default:
		if d.err != nil {
			return d.err
		}
		return fmt.Errorf("unknown object tag %d", tag)
	}
	return d.err
}

// check verifies a complete stage before Import makes it live: what a
// restore verifies of a whole state (every request is held in its
// namespace's held set or queued in all its queues, no queue has a
// grantable head, every namespace has a session or a record, semaphores
// agree), and that nothing in it is newer than the source's Freeze
// (floorL): every token and request or record index is at most floorL,
// and a session of this group's own prefix was opened before index.
func (sg *stage) check(st *state, floorL, index uint64) error {
	for _, s := range sg.sessions {
		if st.sessions[s.id] != nil {
			return fmt.Errorf("session %d is live here already", s.id)
		}
		if sessionGroup(s.id) == st.group && s.id&rawMask >= index {
			return fmt.Errorf("session %d of this group is newer than this entry", s.id)
		}
		for r := s.liveHead; r != nil; r = r.snext {
			if r.index > floorL || r.token > floorL {
				return fmt.Errorf("request %d of session %d is newer than the Freeze (%d)", r.id, s.id, floorL)
			}
			if r.held {
				if r.hprev == nil && s.ns.heldHead != r {
					return fmt.Errorf("request %d of session %d is held outside the held set", r.id, s.id)
				}
				continue
			}
			if len(r.waiters) == 0 {
				return fmt.Errorf("request %d of session %d is neither held nor queued", r.id, s.id)
			}
			for i := range r.waiters {
				if !r.waiters[i].linked() {
					return fmt.Errorf("request %d of session %d is missing from a queue", r.id, s.id)
				}
			}
		}
	}
	for _, name := range sg.names {
		ns := sg.spaces[name]
		if st.namespaces[name] != nil {
			return fmt.Errorf("namespace %s is live here already", quote(name))
		}
		if ns.sessions == 0 && len(ns.records) == 0 {
			return fmt.Errorf("namespace %s has no session and no record", quote(name))
		}
		for _, rec := range ns.records {
			if rec.Index > floorL {
				return fmt.Errorf("record of %s in namespace %s is newer than the Freeze", quote(rec.Name), quote(name))
			}
		}
		for _, res := range ns.resources {
			if err := checkSemaphore(ns, res); err != nil {
				return err
			}
		}
		for res := ns.queueHead; res != nil; res = res.qnext {
			if grantable(res.qhead.req) {
				return fmt.Errorf("queue of %s in namespace %s has a grantable head", quote(res.name), quote(name))
			}
		}
	}
	return nil
}

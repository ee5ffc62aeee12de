package fsm

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sort"
)

// Snap is a snapshot that has begun and is not yet encoded: the state at
// one index, kept by copy-on-write (cow.go) while entries go on.
type Snap struct {
	m    *Machine
	st   *state
	done bool
	// What beginSnapshot captured at the point.
	lastIndex uint64
	limits    Limits
	members   []Member // by id
	requests  int
	sessions  int
	head      *session // the oldest session
	spaces    []nsAt   // sorted by name in Encode
	closed    []tombstone
	secret    string    // the cluster secret ("": none, or left out)
	records   bool      // the state holds something of LevelRecords (format 4)
	groups    *groupsAt // a group state other than the default (format 5; groups.go)
	// changesFrom: the StartChanges index, written last when not 0
	// (startchanges.go).
	changesFrom uint64
}

type nsAt struct {
	ns        *namespace
	name      string
	resources int
}

// snapChunk is how many objects the encoder visits per hold of the read
// lock: about 0.1 ms, the longest an entry waits for a snapshot.
const snapChunk = 1024

// BeginSnapshot marks the point a snapshot is taken at: the state as it is
// now. It takes the write lock for O(namespaces) work. Entries may be
// applied afterwards; the snapshot does not see them. The caller must call
// Encode or Release exactly once; until then no other snapshot can begin
// (BeginSnapshot waits).
func (m *Machine) BeginSnapshot() *Snap {
	m.snapMu.Lock()
	return m.begin()
}

// begin is BeginSnapshot once snapMu is held.
func (m *Machine) begin() *Snap {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.st
	st.cow.active = true
	sn := &Snap{m: m, st: st, lastIndex: st.lastIndex, limits: st.limits,
		requests: len(st.requests), sessions: len(st.sessions), head: st.sessHead, secret: st.clusterSecret,
		records: st.usesRecords(), changesFrom: st.changesFrom}
	if !st.defaultGroups() {
		sn.groups = &groupsAt{group: st.group, offset: st.offset, slots: st.slots, moves: captureMoves(&st.mv)}
	}
	sn.members = make([]Member, 0, len(st.members))
	for _, mb := range st.members {
		sn.members = append(sn.members, mb)
	}
	sort.Slice(sn.members, func(i, j int) bool { return sn.members[i].ID < sn.members[j].ID })
	sn.spaces = make([]nsAt, 0, len(st.namespaces))
	for name, ns := range st.namespaces {
		sn.spaces = append(sn.spaces, nsAt{ns: ns, name: name, resources: len(ns.resources)})
	}
	sn.closed = make([]tombstone, 0, len(st.closed.order))
	st.closed.each(func(t tombstone) { sn.closed = append(sn.closed, t) })
	return sn
}

// TryBeginSnapshot is BeginSnapshot if no other snapshot is being
// encoded, and nil otherwise. Raft's FSM goroutine uses it: waiting there
// for a backup's encoding to end would stop every apply meanwhile.
func (m *Machine) TryBeginSnapshot() *Snap {
	if !m.snapMu.TryLock() {
		return nil
	}
	return m.begin()
}

// Index is the index of the last entry the snapshot includes.
func (sn *Snap) Index() uint64 { return sn.lastIndex }

// Release ends the snapshot without encoding it (Encode releases it too).
// It may be called more than once.
func (sn *Snap) Release() {
	if sn.done {
		return
	}
	sn.done = true
	sn.m.mu.Lock()
	sn.st.cow.thaw()
	sn.m.mu.Unlock()
	sn.m.snapMu.Unlock()
}

// Encode writes the snapshot in the format snapshot.go describes, holding
// the read lock for snapChunk objects at a time, and releases the snapshot.
// An error means the state did not add up (a bug): nothing was written.
func (sn *Snap) Encode() ([]byte, error) {
	if sn.done {
		return nil, fmt.Errorf("fsm: snapshot at index %d was already encoded or released", sn.lastIndex)
	}
	defer sn.Release()
	sort.Slice(sn.spaces, func(i, j int) bool { return sn.spaces[i].name < sn.spaces[j].name })
	en := encoder{b: make([]byte, 0, 64+sn.requests*64+sn.sessions*48)}
	en.b = append(en.b, snapMagic...)
	version := snapFormat(sn.secret != "", sn.records, sn.groups != nil) // the oldest that carries the state (snapshot.go, level.go)
	en.uvarint(version)
	en.uvarint(sn.lastIndex)
	encodeLimits(&en, &sn.limits)
	en.uvarint(uint64(len(sn.members)))
	for i := range sn.members {
		encodeMember(&en, &sn.members[i])
	}
	en.uvarint(uint64(sn.requests)) // lets restore size its maps once

	if err := sn.walk(&en, version); err != nil {
		return nil, err
	}
	en.uvarint(uint64(len(sn.closed)))
	for _, t := range sn.closed {
		en.uvarint(t.id)
		en.str(t.ns)
		en.str(t.secret)
	}
	if version >= 3 {
		en.str(sn.secret) // "" in format 4 without the secret
	}
	if version >= 5 {
		encodeGroups(&en, sn.groups)
	}
	if sn.changesFrom != 0 { // version >= 4: usesRecords
		en.uvarint(sn.changesFrom)
	}
	return binary.LittleEndian.AppendUint32(en.b, crc32.Checksum(en.b, crcTable)), nil
}

// EncodeBackup is Encode without the cluster secret (clustersecret.go):
// what a client may take away (SaveSnapshot). A cluster restored from it
// draws a secret of its own.
func (sn *Snap) EncodeBackup() ([]byte, error) {
	sn.secret = ""
	return sn.Encode()
}

// walk encodes the sessions and the namespaces under the read lock, which
// it lets go between chunks. Every list it follows is bounded by the counts
// taken at the point, so a state that does not add up (a change that
// escaped copy-on-write) is an error, never an endless walk.
func (sn *Snap) walk(en *encoder, version uint64) error {
	w := walker{m: sn.m, chunk: snapChunk}
	if sn.m.snapChunk > 0 {
		w.chunk = sn.m.snapChunk
	}
	w.m.mu.RLock()
	w.locked = true
	defer func() {
		if w.locked { // a panic while the lock was held
			w.m.mu.RUnlock()
		}
	}()
	if err := sn.encodeSessions(en, &w, version); err != nil {
		return err
	}
	return sn.encodeNamespaces(en, &w, version)
}

func (sn *Snap) escaped(what string, n int) error {
	return fmt.Errorf("fsm: snapshot at index %d found %s (%d): a change escaped copy-on-write", sn.lastIndex, what, n)
}

// walker lets entries in between chunks: step counts an object and, every
// snapChunk objects, drops the read lock and takes it again. Whatever the
// encoder read through a view before a step stays valid (it describes the
// point); a view must be taken again after one.
type walker struct {
	m      *Machine
	chunk  int
	visits int
	locked bool
}

func (w *walker) step() {
	w.visits++
	if w.visits%w.chunk == 0 {
		w.m.mu.RUnlock()
		w.locked = false
		if w.m.snapYield != nil {
			w.m.snapYield()
		}
		w.m.mu.RLock()
		w.locked = true
	}
}

// encodeSessions writes the sessions by id, each with its live requests in
// creation order, numbering the requests (ord) for the namespaces.
func (sn *Snap) encodeSessions(en *encoder, w *walker, version uint64) error {
	en.uvarint(uint64(sn.sessions))
	var ord uint32 // requests are referred to by their order in the snapshot
	sessions, requests := 0, 0
	for s := sn.head; s != nil; sessions++ {
		if sessions == sn.sessions {
			return sn.escaped("more sessions than the state had", sessions+1)
		}
		w.step()
		v := s.view()
		encodeSessionFields(en, v)
		en.uvarint(uint64(v.nHeld + v.nPending))
		r, next := v.liveHead, v.newer
		for r != nil {
			if requests == sn.requests {
				return sn.escaped("more requests than the state had", requests+1)
			}
			w.step()
			rv := r.view()
			rv.ord = ord
			ord++
			requests++
			en.uvarint(rv.id)
			en.uvarint(rv.index)
			en.uvarint(uint64(len(rv.names)))
			for _, n := range rv.names {
				en.str(n)
			}
			en.byte1(byte(rv.mode))
			en.bool1(rv.signal)
			en.varint(rv.requestedAt)
			en.bool1(rv.held)
			en.uvarint(rv.token)
			en.varint(rv.acquiredAt)
			if version >= 4 {
				en.uvarint(uint64(rv.maxHolders))
			}
			r = rv.snext
		}
		s = next
	}
	if sessions != sn.sessions || requests != sn.requests {
		return sn.escaped(fmt.Sprintf("%d of %d requests in", requests, sn.requests), sessions)
	}
	return nil
}

// encodeNamespaces writes each namespace's held set in grant order and its
// queues in creation order, as positions of the requests above.
func (sn *Snap) encodeNamespaces(en *encoder, w *walker, version uint64) error {
	en.uvarint(uint64(len(sn.spaces)))
	for _, at := range sn.spaces {
		w.step()
		v := at.ns.view()
		en.str(at.name)
		en.uvarint(uint64(at.resources))
		en.uvarint(uint64(v.nHeld))
		held, queues, nHeld, records := v.heldHead, v.queueHead, v.nHeld, v.records
		k := 0
		for r := held; r != nil; k++ {
			if k == nHeld {
				return sn.escaped("a held list longer than its count in namespace "+quote(at.name), k+1)
			}
			w.step()
			rv := r.view()
			en.uvarint(uint64(rv.ord))
			r = rv.hnext
		}
		if k != nHeld {
			return sn.escaped("a held list shorter than its count in namespace "+quote(at.name), k)
		}
		n := 0
		for res := queues; res != nil; res = sn.st.cow.resourceView(res).qnext {
			if n == at.resources {
				return sn.escaped("more queues than names in namespace "+quote(at.name), n+1)
			}
			w.step()
			n++
		}
		en.uvarint(uint64(n))
		for res, i := queues, 0; res != nil; i++ {
			if i == n {
				return sn.escaped("queues that changed while encoding namespace "+quote(at.name), i+1)
			}
			w.step()
			rv := sn.st.cow.resourceView(res)
			en.str(rv.name)
			head, next := rv.qhead, rv.qnext
			k := 0
			for q := head; q != nil; q = q.view().next {
				if k == sn.requests {
					return sn.escaped("a queue longer than the requests in namespace "+quote(at.name), k+1)
				}
				w.step()
				k++
			}
			en.uvarint(uint64(k))
			for q, j := head, 0; q != nil; j++ {
				if j == k {
					return sn.escaped("a queue that changed while encoding namespace "+quote(at.name), j+1)
				}
				w.step()
				qv := q.view()
				en.uvarint(uint64(qv.req.view().ord))
				q = qv.next
			}
			res = next
		}
		if version >= 4 {
			encodeRecords(en, w, records)
		}
	}
	return nil
}

// encodeRecords writes a namespace's records by name. recs is the map as
// it was at the point: a write after it goes to a copy (writeRecords), and
// a Record is never changed in place.
func encodeRecords(en *encoder, w *walker, recs map[string]*Record) {
	names := make([]string, 0, len(recs))
	for name := range recs {
		names = append(names, name)
	}
	sort.Strings(names)
	en.uvarint(uint64(len(names)))
	for _, name := range names {
		w.step()
		rec := recs[name]
		en.str(rec.Name)
		en.bytes(rec.Value)
		en.uvarint(rec.Token)
		en.varint(rec.Time)
		en.uvarint(rec.Index)
	}
}

// encodeSessionFields writes a session's own fields and its finished
// outcomes, as a snapshot and a slot's export (move_export.go) both carry
// them.
func encodeSessionFields(en *encoder, s *session) {
	en.uvarint(s.id)
	en.str(s.ns.name)
	en.str(s.clientID)
	en.str(s.label)
	en.varint(s.ttl)
	en.varint(s.openedAt)
	en.str(s.secret)
	en.uvarint(s.eventSeq)
	en.uvarint(s.floor)
	en.uvarint(uint64(len(s.finished)))
	for _, o := range s.finished {
		en.uvarint(o.id)
		en.byte1(byte(o.status))
		en.byte1(byte(o.cause))
		en.uvarint(o.token)
		en.str(o.reason)
	}
}

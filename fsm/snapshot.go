package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
)

// The snapshot format, version 2 (every count and number a varint):
//
//	"LCKSNAP\x00" version
//	last index, limits, member directory by id, number of live requests
//	sessions by id: id namespace client-id label ttl opened-at secret-hash
//	    event-seq floor, finished outcomes (id status cause token reason),
//	    live requests in creation order (id index names mode signal
//	    requested-at held token acquired-at)
//	namespaces by name: the number of names in use, the held set in grant
//	    order and the queues in creation order, each a list of requests
//	    given by their position in the sessions above
//	ended sessions' tombstones, oldest first: id namespace secret-hash
//	CRC-32C of all of the above, 4 bytes little endian
//
// Version 1 (still restored) has no secret hashes and no tombstones.
//
// Everything is written in an order fixed by the state itself, so equal
// states have equal bytes and Digest is a hash of them.

var snapMagic = []byte("LCKSNAP\x00")

const (
	snapVersion    = 2
	minSnapVersion = 1
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Snapshot encodes the whole state. It holds the read lock while it encodes
// and returns bytes that no later Apply changes.
func (m *Machine) Snapshot() []byte {
	m.snapMu.Lock()
	defer m.snapMu.Unlock()
	m.mu.RLock()
	defer m.mu.RUnlock()
	return encodeState(m.st)
}

// SnapshotHeader reads the format version and the last index from the head
// of a snapshot Snapshot wrote, without decoding the rest.
func SnapshotHeader(b []byte) (index uint64, version uint32, err error) {
	if !bytes.HasPrefix(b, snapMagic) {
		return 0, 0, errors.New("fsm: not a snapshot (no LCKSNAP header)")
	}
	b = b[len(snapMagic):]
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, 0, errors.New("fsm: snapshot without a version")
	}
	index, m := binary.Uvarint(b[n:])
	if m <= 0 {
		return 0, 0, errors.New("fsm: snapshot without a last index")
	}
	return index, uint32(v), nil
}

// Digest is a SHA-256 of the encoded state: equal on replicas that applied
// the same entries.
func (m *Machine) Digest() [32]byte {
	return sha256.Sum256(m.Snapshot())
}

// Restore replaces the state with the one encoded in r. It decodes and
// checks the new state completely before it takes the write lock to swap it
// in; on any error the old state is left as it was.
func (m *Machine) Restore(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("fsm: reading snapshot: %w", err)
	}
	st, err := decodeState(b)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.st = st
	m.mu.Unlock()
	return nil
}

func encodeState(st *state) []byte {
	en := encoder{b: make([]byte, 0, 64+st.nHeld*48+st.nPending*48+len(st.sessions)*48)}
	en.b = append(en.b, snapMagic...)
	en.uvarint(snapVersion)
	en.uvarint(st.lastIndex)
	encodeLimits(&en, &st.limits)
	ids := make([]string, 0, len(st.members))
	for id := range st.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	en.uvarint(uint64(len(ids)))
	for _, id := range ids {
		m := st.members[id]
		encodeMember(&en, &m)
	}
	en.uvarint(uint64(len(st.requests))) // lets restore size its maps once

	var ord uint32 // requests are referred to by their order in the snapshot
	sids := make([]uint64, 0, len(st.sessions))
	for id := range st.sessions {
		sids = append(sids, id)
	}
	sort.Slice(sids, func(i, j int) bool { return sids[i] < sids[j] })
	en.uvarint(uint64(len(sids)))
	for _, id := range sids {
		s := st.sessions[id]
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
		en.uvarint(uint64(s.nHeld + s.nPending))
		for r := s.liveHead; r != nil; r = r.snext {
			r.ord = ord
			ord++
			en.uvarint(r.id)
			en.uvarint(r.index)
			en.uvarint(uint64(len(r.names)))
			for _, n := range r.names {
				en.str(n)
			}
			en.byte1(byte(r.mode))
			en.bool1(r.signal)
			en.varint(r.requestedAt)
			en.bool1(r.held)
			en.uvarint(r.token)
			en.varint(r.acquiredAt)
		}
	}

	names := make([]string, 0, len(st.namespaces))
	for n := range st.namespaces {
		names = append(names, n)
	}
	sort.Strings(names)
	en.uvarint(uint64(len(names)))
	for _, n := range names {
		ns := st.namespaces[n]
		en.str(ns.name)
		en.uvarint(uint64(len(ns.resources)))
		en.uvarint(uint64(ns.nHeld))
		for r := ns.heldHead; r != nil; r = r.hnext {
			en.uvarint(uint64(r.ord))
		}
		var queues uint64
		for res := ns.queueHead; res != nil; res = res.qnext {
			queues++
		}
		en.uvarint(queues)
		for res := ns.queueHead; res != nil; res = res.qnext {
			en.str(res.name)
			var n uint64
			for w := res.qhead; w != nil; w = w.next {
				n++
			}
			en.uvarint(n)
			for w := res.qhead; w != nil; w = w.next {
				en.uvarint(uint64(w.req.ord))
			}
		}
	}
	en.uvarint(uint64(len(st.closed.order)))
	st.closed.each(func(t tombstone) {
		en.uvarint(t.id)
		en.str(t.ns)
		en.str(t.secret)
	})
	return binary.LittleEndian.AppendUint32(en.b, crc32.Checksum(en.b, crcTable))
}

func decodeState(b []byte) (*state, error) {
	if len(b) < len(snapMagic)+4 || string(b[:len(snapMagic)]) != string(snapMagic) {
		return nil, errors.New("fsm: not a lockcluster snapshot (bad magic)")
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, crcTable) != sum {
		return nil, errors.New("fsm: snapshot checksum mismatch: the snapshot is corrupt or truncated")
	}
	d := &decoder{b: body[len(snapMagic):]}
	v := d.uvarint()
	if d.err == nil && (v < minSnapVersion || v > snapVersion) {
		return nil, fmt.Errorf("fsm: snapshot version %d is not supported (this node knows versions %d to %d)", v, minSnapVersion, snapVersion)
	}
	d.version = byte(v)
	st := newState()
	st.lastIndex = d.uvarint()
	decodeLimits(d, &st.limits)
	if err := st.limits.Validate(); d.err == nil && err != nil {
		return nil, fmt.Errorf("fsm: snapshot has unusable limits: %w", err)
	}
	for n := d.count(4); n > 0 && d.err == nil; n-- {
		var m Member
		decodeMember(d, &m)
		st.members[m.ID] = m
	}
	st.requests = make(map[reqKey]*request, d.count(10))
	all, err := decodeSessions(d, st)
	if err != nil {
		return nil, err
	}
	if err := decodeNamespaces(d, st, all); err != nil {
		return nil, err
	}
	if d.version >= 2 {
		for n := d.count(3); n > 0 && d.err == nil; n-- {
			t := tombstone{id: d.uvarint(), ns: d.str(), secret: d.str()}
			if d.err == nil && (t.secret == "" || st.sessions[t.id] != nil) {
				return nil, fmt.Errorf("fsm: snapshot tombstone of session %d is malformed", t.id)
			}
			st.closed.add(t)
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Errorf("%d trailing bytes", len(d.b)))
	}
	if d.err != nil {
		return nil, fmt.Errorf("fsm: cannot decode snapshot: %w", d.err)
	}
	return st, checkRestored(st)
}

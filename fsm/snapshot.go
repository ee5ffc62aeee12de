package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// The snapshot format, version 5 (every count and number a varint):
//
//	"LCKSNAP\x00" version
//	last index, limits, member directory by id, number of live requests
//	sessions by id: id namespace client-id label ttl opened-at secret-hash
//	    event-seq floor, finished outcomes (id status cause token reason),
//	    live requests in creation order (id index names mode signal
//	    requested-at held token acquired-at max-holders)
//	namespaces by name: the number of names in use, the held set in grant
//	    order and the queues in creation order, each a list of requests
//	    given by their position in the sessions above, and the records by
//	    name (name value token time index); a namespace with records and
//	    no session is listed too
//	ended sessions' tombstones, oldest first: id namespace secret-hash
//	the cluster secret (clustersecret.go)
//	version 5: group, token offset, the slot table as runs (length kind
//	    to epoch) summing to 4096 (groups.go), then the moves in progress:
//	    set-group, the frozen slots' Freezes, the rejected epochs and the
//	    staged imports as their chunks' bytes (move_snap.go)
//	versions 4 and 5, only when the cluster builds changes: the index of
//	    its StartChanges (startchanges.go)
//	CRC-32C of all of the above, 4 bytes little endian
//
// The oldest version that carries the state is written (level.go,
// snapFormat): version 5 only for a state whose group state is not the
// default (group 0, every slot owned at epoch 0, offset 0, no move in
// progress); version 4 only for a state that holds records, a semaphore
// request or record limits other than the defaults (its cluster secret may
// be empty: a backup leaves it out); otherwise version 3, which has no
// max-holders, no records and only the default record limits (the limits
// have 11 fields), or, without a cluster secret, version 2, which has no
// cluster secret either, so that a node of the release before can still
// restore it; so is a backup (Snap.EncodeBackup) of such a state. Version
// 1 (still restored) has no secret hashes and no tombstones either.
//
// Everything is written in an order fixed by the state itself, so equal
// states have equal bytes and Digest is a hash of them.

var snapMagic = []byte("LCKSNAP\x00")

const (
	snapVersion    = 5
	minSnapVersion = 1
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Snapshot encodes the whole state at this moment. Entries applied while it
// encodes do not change what it returns (cow.go).
// An encoding error is a bug in this package, and Snapshot panics with it;
// raft's snapshots use BeginSnapshot and Encode, which return it.
func (m *Machine) Snapshot() []byte {
	b, err := m.BeginSnapshot().Encode()
	if err != nil {
		panic(err)
	}
	return b
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
	if st.group != m.group {
		return fmt.Errorf("fsm: the snapshot is of group %d, this machine applies group %d's log", st.group, m.group)
	}
	m.mu.Lock()
	m.st = st
	m.offset.Store(st.offset)
	m.mu.Unlock()
	return nil
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
	if d.version >= 3 {
		st.clusterSecret = d.str()
		if n := len(st.clusterSecret); d.err == nil && (n < minClusterSecret || n > maxClusterSecret) && (n != 0 || d.version < 4) {
			return nil, fmt.Errorf("fsm: snapshot has a malformed cluster secret (%d bytes)", n)
		}
	}
	if d.version >= 5 {
		if err := decodeGroups(d, st); err != nil {
			return nil, err
		}
		st.findOwnLast()
	}
	if d.version >= 4 && d.err == nil && len(d.b) != 0 {
		st.changesFrom = d.uvarint() // startchanges.go
		if d.err == nil && (st.changesFrom == 0 || st.changesFrom > st.lastIndex) {
			return nil, fmt.Errorf("fsm: snapshot at index %d says changes are built from index %d", st.lastIndex, st.changesFrom)
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Errorf("%d trailing bytes", len(d.b)))
	}
	if d.err != nil {
		return nil, fmt.Errorf("fsm: cannot decode snapshot: %w", d.err)
	}
	if err := checkGroups(st); err != nil {
		return nil, err
	}
	return st, checkRestored(st)
}

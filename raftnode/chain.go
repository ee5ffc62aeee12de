package raftnode

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/hashicorp/raft"
)

// chain is the running hash of every entry the state machine applied:
// hash(i) = SHA-256(hash(previous applied entry) || index || term || type ||
// len(data) || data || len(extensions) || extensions). Two replicas that
// applied the same (index, term, type, data) sequence have equal hashes at
// every common index, and a replica that once applied something else keeps
// a different hash forever: end states can re-converge, histories cannot.
//
// The chain starts at the cluster's first anchor entry (checkpoint.go): a
// node knows its chain from there on, or from a snapshot that carries it.
// A node restored from a snapshot written before chains existed does not
// know it until the next anchor, which a leader in that state proposes.
//
// The chain is only touched on raft's FSM goroutine (ApplyBatch, Snapshot,
// Restore); trackingFSM publishes it under its mutex for readers.
type chain struct {
	known  bool
	anchor uint64   // index of the anchor the chain starts at
	index  uint64   // last index folded in
	hash   [32]byte // value through index
	ring   hashRing // recent values, for comparisons at a common index

	// plant, if set, replaces an entry's data as hashed: only builds with
	// the divergencetest tag set it (plant_on.go), to plant a divergence.
	plant func(*raft.Log) []byte
}

// fold adds one applied entry.
func (c *chain) fold(l *raft.Log) {
	h := sha256.New()
	h.Write(c.hash[:])
	var b [8 + 8 + 1 + 8]byte
	binary.BigEndian.PutUint64(b[0:], l.Index)
	binary.BigEndian.PutUint64(b[8:], l.Term)
	b[16] = byte(l.Type)
	binary.BigEndian.PutUint64(b[17:], uint64(len(l.Data)))
	h.Write(b[:])
	data := l.Data
	if c.plant != nil {
		data = c.plant(l)
	}
	h.Write(data)
	binary.BigEndian.PutUint64(b[0:8], uint64(len(l.Extensions)))
	h.Write(b[0:8])
	h.Write(l.Extensions)
	h.Sum(c.hash[:0])
	c.index = l.Index
	if c.known {
		c.ring.add(c.index, c.hash)
	}
}

// reset starts the chain at an anchor entry.
func (c *chain) reset(l *raft.Log) {
	*c = chain{known: true, anchor: l.Index, plant: c.plant}
	c.fold(l)
}

// at returns the chain's value as of index i: the value after the last
// applied entry at or below i. ok is false when that is not remembered.
func (c *chain) at(i uint64) (hash [32]byte, ok bool, why string) {
	switch {
	case !c.known:
		return hash, false, "this node's chain is not known yet (restored from a snapshot without one; the next anchor starts it)"
	case i > c.index:
		return hash, false, fmt.Sprintf("index %d is past this node's applied index %d", i, c.index)
	case i < c.anchor:
		return hash, false, fmt.Sprintf("index %d is before the chain's anchor at %d", i, c.anchor)
	}
	if h, ok := c.ring.at(i); ok {
		return h, true, ""
	}
	return hash, false, fmt.Sprintf("index %d is older than the %d values this node keeps", i, hashRingSize)
}

// hashRingSize is how many recent chain values a node keeps (40 bytes
// each): enough for a checkpoint to find the index it names, and for a
// checker to compare nodes whose applied indexes differ a little.
const hashRingSize = 16384

// hashRing keeps the chain values of the last hashRingSize applied
// entries, oldest first from head.
type hashRing struct {
	idx  []uint64
	hash [][32]byte
	head int
}

func (r *hashRing) add(i uint64, h [32]byte) {
	if len(r.idx) < hashRingSize {
		r.idx = append(r.idx, i)
		r.hash = append(r.hash, h)
		return
	}
	r.idx[r.head], r.hash[r.head] = i, h
	r.head = (r.head + 1) % hashRingSize
}

// at finds the value of the greatest index <= i, if the ring reaches back
// to i.
func (r *hashRing) at(i uint64) ([32]byte, bool) {
	n := len(r.idx)
	if n == 0 {
		return [32]byte{}, false
	}
	get := func(k int) int { return (r.head + k) % n }
	// first position whose index > i
	k := sort.Search(n, func(k int) bool { return r.idx[get(k)] > i })
	if k == 0 {
		return [32]byte{}, false // older than anything kept
	}
	return r.hash[get(k-1)], true
}

// The snapshot header carries the chain: a node restored from the
// snapshot continues the chain where the snapshot's writer was.
//
//	magic "LCCHAIN1" | flags (1: known) | anchor u64 | index u64 | hash [32]
var chainMagic = [8]byte{'L', 'C', 'C', 'H', 'A', 'I', 'N', '1'}

const chainHeaderSize = 8 + 1 + 8 + 8 + 32

func (c *chain) header() []byte {
	b := make([]byte, chainHeaderSize)
	copy(b, chainMagic[:])
	if c.known {
		b[8] = 1
	}
	binary.BigEndian.PutUint64(b[9:], c.anchor)
	binary.BigEndian.PutUint64(b[17:], c.index)
	copy(b[25:], c.hash[:])
	return b
}

// readChainHeader reads the header from the start of a snapshot. It
// returns the reader positioned at the state machine's own data, and
// ok = false for a snapshot written before the header existed (whose bytes
// the reader then still holds, unread).
func readChainHeader(r io.Reader) (c chain, rest io.Reader, ok bool, err error) {
	br := bufio.NewReaderSize(r, 4096)
	peek, err := br.Peek(len(chainMagic))
	if err != nil && !errors.Is(err, io.EOF) {
		return c, br, false, err
	}
	if !bytes.Equal(peek, chainMagic[:]) {
		return c, br, false, nil
	}
	b := make([]byte, chainHeaderSize)
	if _, err := io.ReadFull(br, b); err != nil {
		return c, br, false, fmt.Errorf("raftnode: snapshot chain header: %w", err)
	}
	c.known = b[8]&1 != 0
	c.anchor = binary.BigEndian.Uint64(b[9:])
	c.index = binary.BigEndian.Uint64(b[17:])
	copy(c.hash[:], b[25:])
	if c.known {
		c.ring.add(c.index, c.hash)
	}
	return c, br, true, nil
}

// chainSnapshot writes the chain header, then the state machine's snapshot.
type chainSnapshot struct {
	raft.FSMSnapshot
	header []byte
}

func (s chainSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s.header); err != nil {
		sink.Cancel()
		return fmt.Errorf("raftnode: writing the snapshot's chain header: %w", err)
	}
	return s.FSMSnapshot.Persist(sink)
}

package fsm

import (
	"fmt"
	"slices"
	"sort"
)

// Export (groups.md §12.1 step 2): the objects of frozen slots, in chunks
// for ImportChunk entries. It is a pure function of the state at the
// slots' Freeze, since nothing in a frozen slot changes and the tombstones
// were copied at that entry: every replica that applied the Freeze, at
// any time until the Drop or Unfreeze, exports the same bytes.

// Export is an export of slots frozen at one epoch: the chunks for
// ImportChunk (seq = position), and what Import needs.
type Export struct {
	Slots  []uint16
	Epoch  uint32
	To     uint16 // the Freeze's target
	FloorL uint64 // the logical index of the Freeze entry (Import's floor)
	Chunks [][]byte
	SHA256 [32]byte // chunkSum(Chunks)
}

// ImportChunks are the ImportChunk commands of the export, in seq order.
func (x *Export) ImportChunks() []*ImportChunk {
	out := make([]*ImportChunk, len(x.Chunks))
	for i, c := range x.Chunks {
		out[i] = &ImportChunk{Slots: x.Slots, Epoch: x.Epoch, Seq: uint32(i), Data: c}
	}
	return out
}

// Import is the Import command that ends the export's move.
func (x *Export) Import() *Import {
	return &Import{Slots: x.Slots, Epoch: x.Epoch, N: uint32(len(x.Chunks)), FloorL: x.FloorL, SHA256: x.SHA256}
}

// Export encodes the objects of slots, frozen at epoch by one Freeze of
// exactly these slots, in chunks of at most ChunkObjects objects and
// ChunkBytes bytes. It holds the read lock (not snapMu: a snapshot in
// progress is not disturbed, and raft's never fails because of it) for
// the whole encoding: O(the state's sessions + the slots' objects).
func (m *Machine) Export(slots []uint16, epoch uint32) (*Export, error) {
	if err := checkSlotSet(slots); err != nil {
		return nil, fmt.Errorf("fsm: export: %w", err)
	}
	objects, size := ChunkObjects, ChunkBytes
	if m.exportChunk > 0 {
		objects = m.exportChunk
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	st := m.st
	mv := st.moveOf(slots, epoch)
	if mv == nil {
		return nil, fmt.Errorf("fsm: export: slots %v are not frozen at epoch %d by one Freeze of exactly them in group %d", slots, epoch, st.group)
	}
	x := &Export{Slots: slices.Clone(slots), Epoch: epoch, To: mv.to, FloorL: mv.floorL}
	c := chunker{objects: objects, bytes: size}
	encodeSlotObjects(&c, st, setOf(slots), mv.tombs)
	x.Chunks = c.done()
	x.SHA256 = chunkSum(x.Chunks)
	return x, nil
}

// encodeSlotObjects writes the objects of the slots in set, in the order
// move_stage.go describes. Every list is the state's own: in a frozen
// slot nothing changes, and the caller holds the read lock.
func encodeSlotObjects(c *chunker, st *state, set slotSet, tombs []tombstone) {
	for s := st.sessHead; s != nil; s = s.newer {
		if !set.has(s.ns.name) {
			continue
		}
		c.object(func(en *encoder) {
			en.byte1(tagSession)
			encodeSessionFields(en, s)
		})
		for r := s.liveHead; r != nil; r = r.snext {
			c.object(func(en *encoder) {
				en.byte1(tagRequest)
				en.uvarint(s.id)
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
				en.uvarint(uint64(r.maxHolders))
			})
		}
	}
	var names []string
	for name := range st.namespaces {
		if set.has(name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		ns := st.namespaces[name]
		c.object(func(en *encoder) {
			en.byte1(tagNamespace)
			en.str(name)
		})
		for r := ns.heldHead; r != nil; r = r.hnext {
			c.object(func(en *encoder) {
				en.byte1(tagHeld)
				en.uvarint(r.sess.id)
				en.uvarint(r.id)
			})
		}
		for res := ns.queueHead; res != nil; res = res.qnext {
			for w := res.qhead; w != nil; w = w.next {
				c.object(func(en *encoder) {
					en.byte1(tagWaiter)
					en.str(res.name)
					en.uvarint(w.req.sess.id)
					en.uvarint(w.req.id)
				})
			}
		}
		recs := make([]string, 0, len(ns.records))
		for n := range ns.records {
			recs = append(recs, n)
		}
		sort.Strings(recs)
		for _, n := range recs {
			rec := ns.records[n]
			c.object(func(en *encoder) {
				en.byte1(tagRecord)
				en.str(rec.Name)
				en.bytes(rec.Value)
				en.uvarint(rec.Token)
				en.varint(rec.Time)
				en.uvarint(rec.Index)
			})
		}
	}
	for _, t := range tombs {
		c.object(func(en *encoder) {
			en.byte1(tagTombstone)
			en.uvarint(t.id)
			en.str(t.ns)
			en.str(t.secret)
		})
	}
}

// chunker cuts a run of objects into chunks: a chunk ends before the
// object that would make it more than objects objects or bytes bytes.
type chunker struct {
	objects, bytes int
	en             encoder
	n              int
	chunks         [][]byte
}

func (c *chunker) object(write func(*encoder)) {
	start := len(c.en.b)
	write(&c.en)
	if c.n > 0 && (c.n == c.objects || len(c.en.b) > c.bytes) {
		obj := slices.Clone(c.en.b[start:])
		c.chunks = append(c.chunks, c.en.b[:start:start])
		c.en = encoder{b: obj}
		c.n = 0
	}
	c.n++
}

func (c *chunker) done() [][]byte {
	if c.n > 0 {
		c.chunks = append(c.chunks, c.en.b)
	}
	return c.chunks
}

// freezeTombs copies the tombstones of the slots in set out of the
// shared FIFO, oldest first (Freeze).
func freezeTombs(st *state, set slotSet) []tombstone {
	var out []tombstone
	st.closed.each(func(t tombstone) {
		if set.has(t.ns) {
			out = append(out, t)
		}
	})
	return out
}

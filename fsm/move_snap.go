package fsm

import (
	"fmt"
	"slices"
	"sort"
)

// The moves in progress in a snapshot (format 5, after the slot table;
// groups.md §6.6):
//
//	set-group (bool)
//	the Freezes of the frozen slots, by first slot: slots epoch to floor-L
//	    tombstones (id namespace secret-hash)
//	the rejected epochs, by slot: slot epoch
//	the staged imports, by (epoch, slots): slots epoch, chunks (bytes)
//
// A stage is kept as its chunks' bytes and decoded again on restore, with
// the checks ImportChunk makes.

// movesAt is what BeginSnapshot captures of st.mv (outMoves and chunks
// never change in place, so sharing them is safe).
type movesAt struct {
	groupSet bool
	out      []*outMove
	rejected [][2]uint32
	stages   []stageAt
}

type stageAt struct {
	slots  []uint16
	epoch  uint32
	chunks [][]byte
}

func captureMoves(mv *moveState) movesAt {
	at := movesAt{groupSet: mv.groupSet}
	seen := map[*outMove]bool{}
	for _, o := range mv.out {
		if !seen[o] {
			seen[o] = true
			at.out = append(at.out, o)
		}
	}
	sort.Slice(at.out, func(i, j int) bool { return at.out[i].slots[0] < at.out[j].slots[0] })
	for s, e := range mv.rejected {
		at.rejected = append(at.rejected, [2]uint32{uint32(s), e})
	}
	sort.Slice(at.rejected, func(i, j int) bool { return at.rejected[i][0] < at.rejected[j][0] })
	for k, sg := range mv.staging {
		_ = k
		at.stages = append(at.stages, stageAt{slots: sg.slots, epoch: sg.epoch, chunks: slices.Clip(sg.chunks)})
	}
	sort.Slice(at.stages, func(i, j int) bool {
		a, b := at.stages[i], at.stages[j]
		if a.epoch != b.epoch {
			return a.epoch < b.epoch
		}
		return slices.Compare(a.slots, b.slots) < 0
	})
	return at
}

func encodeMoves(en *encoder, at *movesAt) {
	en.bool1(at.groupSet)
	en.uvarint(uint64(len(at.out)))
	for _, o := range at.out {
		encodeSlots(en, o.slots)
		en.uvarint(uint64(o.epoch))
		en.uvarint(uint64(o.to))
		en.uvarint(o.floorL)
		en.uvarint(uint64(len(o.tombs)))
		for _, t := range o.tombs {
			en.uvarint(t.id)
			en.str(t.ns)
			en.str(t.secret)
		}
	}
	en.uvarint(uint64(len(at.rejected)))
	for _, r := range at.rejected {
		en.uvarint(uint64(r[0]))
		en.uvarint(uint64(r[1]))
	}
	en.uvarint(uint64(len(at.stages)))
	for _, sg := range at.stages {
		encodeSlots(en, sg.slots)
		en.uvarint(uint64(sg.epoch))
		en.uvarint(uint64(len(sg.chunks)))
		for _, c := range sg.chunks {
			en.bytes(c)
		}
	}
}

// decodeMoves reads what encodeMoves wrote into st, whose slot table is
// read already, and checks it against the table: every frozen slot has
// exactly one Freeze that names it with its epoch and target, and no
// other slot has one; a Freeze's floor is at most L(last index) and its
// tombstones are of its slots; a staged import is of slots the group may
// import at its epoch, not rejected, and its chunks decode.
func decodeMoves(d *decoder, st *state) error {
	mv := &st.mv
	mv.groupSet = d.bool1()
	if d.err == nil && mv.groupSet && st.group == 0 {
		return fmt.Errorf("fsm: snapshot of group 0 has a SetGroup")
	}
	last := st.logical(st.lastIndex)
	for n := d.count(4); n > 0 && d.err == nil; n-- {
		o := &outMove{slots: decodeSlots(d), epoch: d.uint32v(), to: d.uint16v(), floorL: d.uvarint()}
		for k := d.count(3); k > 0 && d.err == nil; k-- {
			t := tombstone{id: d.uvarint(), ns: d.str(), secret: d.str()}
			if d.err == nil && (t.secret == "" || !setOf(o.slots).has(t.ns)) {
				return fmt.Errorf("fsm: snapshot Freeze of slots %v has a malformed tombstone of session %d", o.slots, t.id)
			}
			o.tombs = append(o.tombs, t)
		}
		if d.err != nil {
			break
		}
		if o.floorL > last || o.epoch == 0 {
			return fmt.Errorf("fsm: snapshot Freeze of slots %v at epoch %d has floor %d past L(last index) %d", o.slots, o.epoch, o.floorL, last)
		}
		if mv.out == nil {
			mv.out = make(map[uint16]*outMove)
		}
		for _, s := range o.slots {
			if mv.out[s] != nil || st.slots[s] != (slotState{kind: slotFrozen, to: o.to, epoch: o.epoch}) {
				return fmt.Errorf("fsm: snapshot Freeze of slots %v does not match slot %d (%s)", o.slots, s, st.slots[s].describe())
			}
			mv.out[s] = o
		}
	}
	for s := range st.slots {
		if d.err == nil && st.slots[s].kind == slotFrozen && mv.out[uint16(s)] == nil {
			return fmt.Errorf("fsm: snapshot slot %d is frozen without its Freeze", s)
		}
	}
	prev := -1
	for n := d.count(2); n > 0 && d.err == nil; n-- {
		s, e := d.uvarint(), d.uint32v()
		if d.err != nil {
			break
		}
		if s >= Slots || int(s) <= prev || e == 0 {
			return fmt.Errorf("fsm: snapshot rejected epochs are malformed at slot %d", s)
		}
		prev = int(s)
		if mv.rejected == nil {
			mv.rejected = make(map[uint16]uint32)
		}
		mv.rejected[uint16(s)] = e
	}
	for n := d.count(3); n > 0 && d.err == nil; n-- {
		slots, epoch := decodeSlots(d), d.uint32v()
		k := d.count(1)
		if d.err != nil {
			break
		}
		if epoch == 0 || st.rejectedAt(slots, epoch) {
			return fmt.Errorf("fsm: snapshot stages slots %v at epoch %d, which was rejected", slots, epoch)
		}
		for _, s := range slots {
			if !st.importable(s, epoch) {
				return fmt.Errorf("fsm: snapshot stages slot %d at epoch %d, which group %d cannot import (%s)", s, epoch, st.group, st.slots[s].describe())
			}
		}
		key := keyOf(slots, epoch)
		if mv.staging[key] != nil {
			return fmt.Errorf("fsm: snapshot stages slots %v at epoch %d twice", slots, epoch)
		}
		sg := newStage(slots, epoch)
		for ; k > 0 && d.err == nil; k-- {
			c := d.bytes()
			if d.err != nil {
				break
			}
			if err := sg.add(c); err != nil {
				return fmt.Errorf("fsm: snapshot staged chunk %d of slots %v at epoch %d: %w", len(sg.chunks), slots, epoch, err)
			}
		}
		if mv.staging == nil {
			mv.staging = make(map[stageKey]*stage)
		}
		mv.staging[key] = sg
	}
	return nil
}

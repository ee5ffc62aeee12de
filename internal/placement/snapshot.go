package placement

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/lockcluster/lockcluster/fsm"
)

// The snapshot section: the whole directory, written only when it is not
// the default state (Empty), so that a snapshot of group 0 in a cluster
// of one group stays byte-identical to today's (groups.md I4).
//
//	byte     section version (1)
//	uvarint  nextGroup
//	uvarint  number of groups ≥ 1, then each by ascending id:
//	         uvarint id, uvarint state, voters, nonvoters (a uvarint count
//	         then each id as a uvarint length and its bytes)
//	uvarint  number of runs of the slot table, then each: uvarint length
//	         (≥ 1), uvarint group, uvarint epoch; the lengths add up to
//	         fsm.Slots and two neighbouring runs differ
//	uvarint  number of move records, then each by ascending first slot:
//	         slots (a uvarint count then each slot), uvarint from, to,
//	         epoch, phase, freezeL
//	4 bytes  CRC-32C (Castagnoli) of all the bytes before, big-endian
//
// The encoding is canonical: Decode accepts only what Encode writes, so
// that encode → decode → encode is byte-identical, and equal states have
// equal bytes (a section that describes the default state is refused).

const sectionVersion = 1

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// Encode returns the snapshot section of the directory: nil for the
// default state.
func (m *Machine) Encode() []byte {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.encode()
}

func (st *state) encode() []byte {
	if st.empty() {
		return nil
	}
	en := encoder{}
	en.byte1(sectionVersion)
	en.uvarint(uint64(st.nextGroup))
	ids := make([]uint16, 0, len(st.groups))
	for id := range st.groups {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	en.uvarint(uint64(len(ids)))
	for _, id := range ids {
		g := st.groups[id]
		en.uvarint(uint64(id))
		en.uvarint(uint64(g.state))
		en.strs(g.voters)
		en.strs(g.nonvoters)
	}
	type run struct {
		n int
		r route
	}
	var runs []run
	for _, r := range st.slots {
		if len(runs) > 0 && runs[len(runs)-1].r == r {
			runs[len(runs)-1].n++
		} else {
			runs = append(runs, run{1, r})
		}
	}
	en.uvarint(uint64(len(runs)))
	for _, r := range runs {
		en.uvarint(uint64(r.n))
		en.uvarint(uint64(r.r.group))
		en.uvarint(uint64(r.r.epoch))
	}
	mvs := st.distinctMoves()
	en.uvarint(uint64(len(mvs)))
	for _, mv := range mvs {
		en.slots(mv.slots)
		en.uvarint(uint64(mv.from))
		en.uvarint(uint64(mv.to))
		en.uvarint(uint64(mv.epoch))
		en.uvarint(uint64(mv.phase))
		en.uvarint(mv.freezeL)
	}
	return appendCRC(en.b)
}

// appendCRC appends the CRC-32C of b to it.
func appendCRC(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32c))
}

// Decode returns a machine with the directory of a snapshot section (nil
// or empty: the default state), after checking it; its last index is 0.
func Decode(section []byte) (*Machine, error) {
	st, err := decodeState(section)
	if err != nil {
		return nil, err
	}
	return &Machine{st: st}, nil
}

// Restore replaces the machine's directory with a snapshot section's
// (nil or empty: the default state), taken at raft index index. On an
// error the machine is unchanged.
func (m *Machine) Restore(index uint64, section []byte) error {
	st, err := decodeState(section)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.st, m.last = st, index
	return nil
}

func decodeState(b []byte) (*state, error) {
	if len(b) == 0 {
		return newState(), nil
	}
	st, err := parseState(b)
	if err != nil {
		return nil, fmt.Errorf("placement: snapshot section: %w", err)
	}
	return st, nil
}

func parseState(b []byte) (*state, error) {
	if len(b) < 5 {
		return nil, fmt.Errorf("%d bytes is too short", len(b))
	}
	body := b[:len(b)-4]
	if got, want := crc32.Checksum(body, crc32c), binary.BigEndian.Uint32(b[len(b)-4:]); got != want {
		return nil, fmt.Errorf("CRC-32C %08x, want %08x", got, want)
	}
	d := decoder{b: body}
	if v := d.byte1(); v != sectionVersion {
		return nil, fmt.Errorf("version %d is not supported (this node knows %d): upgrade this node", v, sectionVersion)
	}
	st := newState()
	next := d.uvarint()
	if d.err == nil && (next < 1 || next > reservedGroup) {
		return nil, fmt.Errorf("next group %d is not in [1, %d]", next, reservedGroup)
	}
	st.nextGroup = uint16(next)
	ng := d.count()
	prev := uint16(0)
	for i := 0; i < ng && d.err == nil; i++ {
		id := d.u16()
		state := GroupState(d.u8())
		g := &group{voters: d.strs(), nonvoters: d.strs(), state: state}
		if d.err != nil {
			break
		}
		if id <= prev || id >= st.nextGroup {
			return nil, fmt.Errorf("group %d is not ascending in [1, next group %d)", id, st.nextGroup)
		}
		if !state.valid() {
			return nil, fmt.Errorf("group %d: %s is not a group state", id, state)
		}
		if err := checkMembers(g.voters, g.nonvoters); err != nil {
			return nil, fmt.Errorf("group %d: %s", id, err.Msg)
		}
		st.groups[id], prev = g, id
	}
	nr := d.count()
	at := 0
	var last route
	for i := 0; i < nr && d.err == nil; i++ {
		n := d.uvarint()
		r := route{group: d.u16(), epoch: d.u32()}
		if d.err != nil {
			break
		}
		if n == 0 || n > uint64(fsm.Slots-at) {
			return nil, fmt.Errorf("a run of %d slots at slot %d", n, at)
		}
		if i > 0 && r == last {
			return nil, fmt.Errorf("the run at slot %d continues the one before", at)
		}
		if !st.exists(r.group) {
			return nil, fmt.Errorf("slots %d to %d route to group %d, which does not exist", at, at+int(n)-1, r.group)
		}
		if st.groupState(r.group) == GroupCreating {
			return nil, fmt.Errorf("slots %d to %d route to group %d, which is creating", at, at+int(n)-1, r.group)
		}
		for j := 0; j < int(n); j++ {
			st.slots[at+j] = r
		}
		at += int(n)
		last = r
	}
	if d.err == nil && at != fsm.Slots {
		return nil, fmt.Errorf("the runs cover %d slots, not %d", at, fsm.Slots)
	}
	nm := d.count()
	first := -1
	for i := 0; i < nm && d.err == nil; i++ {
		mv := &move{slots: d.slots()}
		mv.from, mv.to, mv.epoch, mv.phase, mv.freezeL = d.u16(), d.u16(), d.u32(), Phase(d.u8()), d.uvarint()
		if d.err != nil {
			break
		}
		if err := checkSlotSet(mv.slots); err != nil {
			return nil, fmt.Errorf("a move record: %s", err.Msg)
		}
		if int(mv.slots[0]) <= first {
			return nil, fmt.Errorf("the move record of slot %d is not after slot %d's", mv.slots[0], first)
		}
		first = int(mv.slots[0])
		if err := st.checkMove(mv); err != nil {
			return nil, fmt.Errorf("the move of slots %s at epoch %d: %w", fmtSlots(mv.slots), mv.epoch, err)
		}
		for _, s := range mv.slots {
			if st.moves[s] != nil {
				return nil, fmt.Errorf("slot %d is in two move records", s)
			}
			st.moves[s] = mv
		}
	}
	if d.err == nil && len(d.b) != 0 {
		return nil, fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	if st.empty() {
		return nil, errors.New("it describes the default state, which is written as nothing")
	}
	return st, nil
}

// checkMove checks a move record against the slot table and the groups:
// what apply keeps true.
func (st *state) checkMove(mv *move) error {
	if !mv.phase.valid() {
		return fmt.Errorf("%s is not a phase", mv.phase)
	}
	if mv.epoch == 0 {
		return errors.New("epoch 0 is no move's")
	}
	if mv.from == mv.to {
		return fmt.Errorf("from and to are both group %d", mv.from)
	}
	for _, g := range []uint16{mv.from, mv.to} {
		if s := st.groupState(g); s == 0 || s == GroupCreating {
			return fmt.Errorf("group %d does not exist or is creating", g)
		}
	}
	switch {
	case mv.phase == PhaseBegun && mv.freezeL != 0:
		return fmt.Errorf("freezeL %d before frozen", mv.freezeL)
	case mv.phase >= PhaseFrozen && mv.phase <= PhaseDropped && mv.freezeL == 0:
		return fmt.Errorf("phase %s without freezeL", mv.phase)
	}
	for _, s := range mv.slots {
		r := st.slots[s]
		var ok bool
		switch mv.phase {
		case PhaseBegun, PhaseFrozen, PhaseImported:
			ok = r.group == mv.from && r.epoch < mv.epoch
		case PhaseFlipped, PhaseDropped:
			ok = r == route{group: mv.to, epoch: mv.epoch}
		case PhaseAborted:
			ok = r == route{group: mv.from, epoch: mv.epoch}
		}
		if !ok {
			return fmt.Errorf("phase %s from group %d to %d, but slot %d routes to group %d at epoch %d", mv.phase, mv.from, mv.to, s, r.group, r.epoch)
		}
	}
	return nil
}

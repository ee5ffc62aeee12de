package placement

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestPropertyInvariants applies random entry sequences, mostly well
// formed and close to the state (the next group id, a slot's own group,
// the epoch above it, the phase after a move's), with malformed ones,
// stale ones and undecodable bytes mixed in, and checks after every entry:
//
//   - every slot routes to an existing group, never a creating one;
//   - a slot's epoch never decreases, and its route changes only by a
//     flip or an abort that names it;
//   - a slot is in at most one move record (Moves' sets are disjoint and
//     agree with MoveOf);
//   - a move's phase never goes back, and aborted follows only begun or
//     frozen;
//   - a refused, duplicate or undecodable entry changes nothing;
//   - an applied entry, applied again, is a duplicate;
//   - Encode → Decode → Encode is byte-identical, reads the same, and
//     the default state (Empty) encodes to nothing.
func TestPropertyInvariants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := New()
		var index uint64
		type moveKey struct {
			first uint16
			epoch uint32
			from  uint16
			to    uint16
		}
		seen := map[moveKey]Phase{}
		var prev [4096]route
		steps := rapid.IntRange(20, 100).Draw(t, "steps")
		for step := 0; step < steps; step++ {
			data, cmd := genEntry(t, m)
			if rapid.IntRange(0, 30).Draw(t, "stale index") == 30 && index > 0 {
				index-- // a replayed index: refused
			} else {
				index += uint64(rapid.IntRange(1, 3).Draw(t, "gap"))
			}
			before := m.Encode() // canonical: equal bytes, equal states
			r, err := m.Apply(index, data)
			changed := err == nil && r.Err == nil && !r.Duplicate
			if !changed {
				if got := m.Encode(); string(got) != string(before) {
					t.Fatalf("step %d: %T refused or duplicate (%v, %v) but the section changed", step, cmd, r.Err, err)
				}
			}
			if err == nil && r.Err == nil {
				index++
				r2, err2 := m.Apply(index, data)
				if err2 != nil || r2.Err != nil || !r2.Duplicate {
					t.Fatalf("step %d: %T applied again: %+v %v, want a duplicate", step, cmd, r2, err2)
				}
			}
			if err != nil && cmd != nil {
				t.Fatalf("step %d: encoded %T does not decode: %v", step, cmd, err)
			}

			// Routes: existing, non-creating groups; epochs only grow;
			// changed only by a flip or an abort naming the slot.
			groups := map[uint16]GroupState{}
			for _, g := range m.Groups() {
				groups[g.ID] = g.State
			}
			tbl := table(m)
			for s := range 4096 {
				g, e := tbl[s].group, tbl[s].epoch
				st, ok := groups[g]
				if !ok || st == GroupCreating {
					t.Fatalf("step %d: slot %d routes to group %d (exists %v, %s)", step, s, g, ok, st)
				}
				if e < prev[s].epoch {
					t.Fatalf("step %d: slot %d's epoch went from %d to %d", step, s, prev[s].epoch, e)
				}
				if (route{g, e}) != prev[s] {
					ok := false
					switch c := cmd.(type) {
					case *DirMovePhase:
						ok = c.Phase == PhaseFlipped && slices.Contains(c.Slots, uint16(s))
					case *DirMoveAbort:
						ok = slices.Contains(c.Slots, uint16(s))
					}
					if !ok || !changed {
						t.Fatalf("step %d: slot %d's route changed from %v to %d/%d by %T", step, s, prev[s], g, e, cmd)
					}
				}
				prev[s] = route{g, e}
			}

			// Moves: disjoint sets that agree with MoveOf; phases forward.
			var owner [4096]int
			for i, mv := range m.Moves() {
				for _, s := range mv.Slots {
					if owner[s] != 0 {
						t.Fatalf("step %d: slot %d is in two move records", step, s)
					}
					owner[s] = i + 1
					if got, ok := m.MoveOf(s); !ok || got.Epoch != mv.Epoch || !slices.Equal(got.Slots, mv.Slots) {
						t.Fatalf("step %d: MoveOf(%d) = %+v, %v; Moves has %+v", step, s, got, ok, mv)
					}
				}
				if mv.Active() {
					if st := groups[mv.To]; st != GroupServing && st != GroupDraining {
						t.Fatalf("step %d: a move in progress into group %d, which is %s", step, mv.To, st)
					}
				}
				k := moveKey{mv.Slots[0], mv.Epoch, mv.From, mv.To}
				if p, ok := seen[k]; ok {
					back := mv.Phase < p && mv.Phase != PhaseAborted
					if mv.Phase == PhaseAborted && p > PhaseFrozen && p != PhaseAborted {
						back = true
					}
					if p == PhaseAborted && mv.Phase != PhaseAborted {
						back = true
					}
					if back {
						t.Fatalf("step %d: the move %+v went from %s to %s", step, mv, p, mv.Phase)
					}
				}
				seen[k] = mv.Phase
			}
			m.mu.RLock()
			for s := range 4096 {
				if (m.st.moves[s] != nil) != (owner[s] != 0) {
					t.Fatalf("step %d: slot %d has a record %v, Moves %v", step, s, m.st.moves[s] != nil, owner[s] != 0)
				}
			}
			m.mu.RUnlock()
			checkRoundTrip(t, m)
		}
	})
}

// genEntry draws an entry for m's state: its bytes, and the command they
// encode (nil for bytes drawn at random).
func genEntry(t *rapid.T, m *Machine) ([]byte, Command) {
	groups := m.Groups()
	next := m.NextGroup()
	anyGroup := func(label string) uint16 {
		if rapid.IntRange(0, 10).Draw(t, label+" wild") == 10 {
			return uint16(rapid.IntRange(0, int(next)+1).Draw(t, label))
		}
		return groups[rapid.IntRange(0, len(groups)-1).Draw(t, label)].ID
	}
	ids := func(label string, atLeastOne bool) []string {
		pool := []string{"n1", "n2", "n3", "n4", "n5"}
		var out []string
		for _, id := range pool {
			if rapid.IntRange(0, 2).Draw(t, label+" "+id) == 2 {
				out = append(out, id)
			}
		}
		if atLeastOne && len(out) == 0 && rapid.IntRange(0, 10).Draw(t, label+" none") < 10 {
			out = append(out, pool[rapid.IntRange(0, 4).Draw(t, label+" one")])
		}
		if len(out) > 1 && rapid.IntRange(0, 15).Draw(t, label+" unsorted") == 15 {
			slices.Reverse(out)
		}
		return out
	}
	members := func() ([]string, []string) {
		v := ids("voters", true)
		var nv []string
		for _, id := range ids("nonvoters", false) {
			if !slices.Contains(v, id) || rapid.IntRange(0, 15).Draw(t, "overlap") == 15 {
				nv = append(nv, id)
			}
		}
		return v, nv
	}
	// target is a group that is serving, usually, other than from.
	target := func(from uint16) uint16 {
		var ok []uint16
		for _, g := range groups {
			if g.State == GroupServing && g.ID != from {
				ok = append(ok, g.ID)
			}
		}
		if len(ok) == 0 || rapid.IntRange(0, 8).Draw(t, "wild to") == 8 {
			return anyGroup("to")
		}
		return ok[rapid.IntRange(0, len(ok)-1).Draw(t, "to")]
	}
	// A slot set: a few slots of a small pool (so moves meet), now and
	// then a range, or a malformed one.
	slotSet := func() []uint16 {
		pool := []uint16{0, 1, 2, 3, 4, 485, 4095}
		var out []uint16
		switch rapid.IntRange(0, 12).Draw(t, "set kind") {
		case 11:
			lo := rapid.IntRange(0, 4095).Draw(t, "lo")
			hi := rapid.IntRange(lo, min(4095, lo+rapid.IntRange(0, 600).Draw(t, "len"))).Draw(t, "hi")
			for s := lo; s <= hi; s++ {
				out = append(out, uint16(s))
			}
		case 12:
			return []uint16{uint16(rapid.IntRange(0, 5000).Draw(t, "bad slot")), 2, 1}
		default:
			for _, s := range pool {
				if rapid.IntRange(0, 2).Draw(t, fmt.Sprintf("slot %d", s)) == 2 {
					out = append(out, s)
				}
			}
		}
		return out
	}
	// An existing move record, usually one in progress.
	recorded := func() (Move, bool) {
		var all, active []Move
		for _, mv := range m.Moves() {
			all = append(all, mv)
			if mv.Active() {
				active = append(active, mv)
			}
		}
		switch {
		case len(active) > 0 && rapid.IntRange(0, 4).Draw(t, "finished") < 4:
			return active[rapid.IntRange(0, len(active)-1).Draw(t, "move")], true
		case len(all) > 0 && rapid.IntRange(0, 6).Draw(t, "unrecorded") < 6:
			return all[rapid.IntRange(0, len(all)-1).Draw(t, "move")], true
		}
		return Move{}, false
	}
	var cmd Command
	switch rapid.IntRange(0, 24).Draw(t, "kind") {
	case 24:
		b := rapid.SliceOfN(rapid.Byte(), 0, 12).Draw(t, "garbage")
		if len(b) > 0 && rapid.Bool().Draw(t, "typed garbage") {
			b[0] = byte(rapid.IntRange(32, 38).Draw(t, "type"))
		}
		return b, nil
	case 0, 1, 2:
		g := next
		if rapid.IntRange(0, 5).Draw(t, "other id") == 5 {
			g = uint16(rapid.IntRange(0, int(next)+1).Draw(t, "id"))
		}
		v, nv := members()
		cmd = &DirCreateGroup{Group: g, Voters: v, Nonvoters: nv}
	case 3:
		v, nv := members()
		cmd = &DirSetGroupMembers{Group: anyGroup("group"), Voters: v, Nonvoters: nv}
	case 4, 5:
		st := GroupState(rapid.IntRange(1, 3).Draw(t, "state"))
		if rapid.IntRange(0, 10).Draw(t, "bad state") == 10 {
			st = GroupState(rapid.IntRange(0, 255).Draw(t, "state value"))
		}
		cmd = &DirSetGroupState{Group: anyGroup("group"), State: st}
	case 6, 7, 8, 9, 10, 11:
		slots := slotSet()
		var from uint16
		var epoch uint32
		if len(slots) > 0 && slots[0] < 4096 {
			g, e, _ := m.LookupSlot(slots[0])
			from, epoch = g, e+uint32(rapid.IntRange(1, 2).Draw(t, "epoch step"))
			if rapid.IntRange(0, 10).Draw(t, "stale epoch") == 10 {
				epoch = e
			}
		}
		if rapid.IntRange(0, 8).Draw(t, "wild from") == 8 {
			from = anyGroup("from")
		}
		cmd = &DirMoveBegin{Slots: slots, From: from, To: target(from), Epoch: epoch}
	case 12, 13, 14, 15, 16, 17, 18, 19, 20, 21:
		mv, ok := recorded()
		c := &DirMovePhase{Slots: mv.Slots, Epoch: mv.Epoch, Phase: mv.Phase + 1}
		if !ok {
			c.Slots, c.Epoch = slotSet(), uint32(rapid.IntRange(0, 4).Draw(t, "epoch"))
			c.Phase = Phase(rapid.IntRange(int(PhaseFrozen), int(PhaseDropped)).Draw(t, "phase"))
		}
		if rapid.IntRange(0, 6).Draw(t, "other phase") == 6 {
			c.Phase = Phase(rapid.IntRange(0, 7).Draw(t, "phase"))
		}
		switch {
		case c.Phase == PhaseFrozen && ok && mv.FreezeL != 0 && rapid.IntRange(0, 3).Draw(t, "same freezeL") < 3:
			c.FreezeL = mv.FreezeL // a repeat
		case c.Phase == PhaseFrozen:
			c.FreezeL = uint64(rapid.IntRange(1, 3).Draw(t, "freezeL"))
			if rapid.IntRange(0, 10).Draw(t, "no freezeL") == 10 {
				c.FreezeL = 0
			}
		case rapid.IntRange(0, 20).Draw(t, "stray freezeL") == 20:
			c.FreezeL = 1
		}
		cmd = c
	default:
		mv, ok := recorded()
		c := &DirMoveAbort{Slots: mv.Slots, Epoch: mv.Epoch}
		if !ok {
			c.Slots, c.Epoch = slotSet(), uint32(rapid.IntRange(0, 4).Draw(t, "epoch"))
		}
		cmd = c
	}
	b, err := EncodeEntry(cmd)
	if err != nil {
		t.Fatalf("EncodeEntry(%T): %v", cmd, err)
	}
	return b, cmd
}

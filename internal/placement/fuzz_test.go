package placement

import (
	"testing"
)

// fuzzMachine is a machine with groups and moves in every phase, for the
// fuzzers to apply entries to: 1 serving, 2 creating, 3 draining; slots
// 1-2 begun, 3 frozen, 4 imported, 5 flipped, 6 dropped, 7 aborted.
func fuzzMachine(t testing.TB) (*Machine, uint64) {
	m := New()
	var i uint64
	apply := func(c Command) {
		i++
		b, err := EncodeEntry(c)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := m.Apply(i, b); err != nil || r.Err != nil {
			t.Fatalf("setup %T: %v %v", c, err, r.Err)
		}
	}
	apply(&DirCreateGroup{Group: 1, Voters: []string{"n1", "n2", "n3"}})
	apply(&DirCreateGroup{Group: 2, Voters: []string{"n1"}, Nonvoters: []string{"n2"}})
	apply(&DirCreateGroup{Group: 3, Voters: []string{"n3"}})
	apply(&DirSetGroupState{Group: 1, State: GroupServing})
	apply(&DirSetGroupState{Group: 3, State: GroupServing})
	for s, p := range []Phase{PhaseBegun, PhaseFrozen, PhaseImported, PhaseFlipped, PhaseDropped, PhaseAborted} {
		slots := []uint16{uint16(s + 2)}
		if s == 0 {
			slots = []uint16{1, 2}
		}
		apply(&DirMoveBegin{Slots: slots, From: 0, To: 1, Epoch: 1})
		limit := p
		if p == PhaseAborted {
			limit = PhaseFrozen // aborted once frozen
		}
		for q := PhaseFrozen; q <= limit; q++ {
			c := &DirMovePhase{Slots: slots, Epoch: 1, Phase: q}
			if q == PhaseFrozen {
				c.FreezeL = 10
			}
			apply(c)
		}
		if p == PhaseAborted {
			apply(&DirMoveAbort{Slots: slots, Epoch: 1})
		}
	}
	apply(&DirSetGroupState{Group: 3, State: GroupDraining})
	return m, i
}

func seedEntries(t testing.TB) [][]byte {
	var out [][]byte
	for _, c := range []Command{
		&DirCreateGroup{Group: 4, Voters: []string{"n1"}},
		&DirCreateGroup{Group: 1, Voters: []string{"n1", "n2", "n3"}},
		&DirSetGroupMembers{Group: 2, Voters: []string{"a", "b"}, Nonvoters: []string{"c"}},
		&DirSetGroupState{Group: 2, State: GroupServing},
		&DirMoveBegin{Slots: []uint16{8, 9}, From: 0, To: 1, Epoch: 1},
		&DirMoveBegin{Slots: []uint16{6}, From: 1, To: 0, Epoch: 2},
		&DirMovePhase{Slots: []uint16{1, 2}, Epoch: 1, Phase: PhaseFrozen, FreezeL: 3},
		&DirMovePhase{Slots: []uint16{3}, Epoch: 1, Phase: PhaseImported},
		&DirMovePhase{Slots: []uint16{5}, Epoch: 1, Phase: PhaseDropped},
		&DirMoveAbort{Slots: []uint16{3}, Epoch: 1},
		&DirMoveAbort{Slots: []uint16{4}, Epoch: 1},
	} {
		b, err := EncodeEntry(c)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// FuzzApply applies arbitrary bytes to a machine with groups and moves in
// every phase: never a panic; an entry that does not decode, is refused
// or is a duplicate changes nothing; one that applies leaves a state whose
// section round-trips, and applied again is a duplicate.
func FuzzApply(f *testing.F) {
	for _, b := range seedEntries(f) {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x22, 0x01, 0x01, 0x01, 0x80, 0x02, 0x00})
	base, last := fuzzMachine(f)
	baseBytes := base.Encode()
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(baseBytes)
		if err != nil {
			t.Fatal(err)
		}
		r, err := m.Apply(last+1, data)
		if err != nil || r.Err != nil || r.Duplicate {
			if got := m.Encode(); string(got) != string(baseBytes) {
				t.Fatalf("refused (%v, %v) or duplicate, but the state changed", err, r.Err)
			}
			if err == nil && IsEntry(data) == false {
				t.Fatalf("bytes that are not a directory entry decoded")
			}
			return
		}
		checkRoundTrip(t, m)
		if r2, err := m.Apply(last+2, data); err != nil || r2.Err != nil || !r2.Duplicate {
			t.Fatalf("applied again: %+v, %v; want a duplicate", r2, err)
		}
	})
}

// FuzzDecode decodes arbitrary sections: never a panic, and a section
// that decodes is exactly what its state encodes to (the encoding is
// canonical), reads the same after another round trip, and is never the
// default state's.
func FuzzDecode(f *testing.F) {
	m, _ := fuzzMachine(f)
	f.Add(m.Encode())
	one := New()
	one.Apply(1, mustEncode(f, &DirCreateGroup{Group: 1, Voters: []string{"n1"}}))
	f.Add(one.Encode())
	f.Add([]byte{})
	f.Add([]byte{1, 1, 0, 1, 0x80, 0x20, 0, 1, 0})
	if b := m.Encode(); len(b) > 4 {
		f.Add(b[:len(b)-4]) // the body: checkDecode adds the CRC
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
		// The same bytes as a body with a good CRC, so that the fuzzer
		// reaches the structure's checks.
		checkDecode(t, withCRC(data))
	})
}

func checkDecode(t *testing.T, data []byte) {
	m, err := Decode(data)
	if err != nil {
		return
	}
	if len(data) == 0 {
		if !m.Empty() {
			t.Fatal("an empty section decodes to a state that is not the default")
		}
		return
	}
	if m.Empty() {
		t.Fatal("a non-empty section decoded to the default state")
	}
	if got := m.Encode(); string(got) != string(data) {
		t.Fatalf("decoded %x, re-encoded %x", data, got)
	}
	checkRoundTrip(t, m)
}

func mustEncode(t testing.TB, c Command) []byte {
	b, err := EncodeEntry(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

package placement

import (
	"errors"
	"sync"
	"testing"

	"github.com/lockcluster/lockcluster/fsm"
)

// TestIsEntry pins the routing rule group 0's raft adapter will use:
// fsm's entries start with their envelope version and are never the
// directory's; the directory's start with their type, 32 and up, and fsm
// refuses them rather than skip them (an old node stops, it does not
// route differently).
func TestIsEntry(t *testing.T) {
	for _, c := range []fsm.Command{
		&fsm.OpenSession{Namespace: "default", TTL: 1e9},
		&fsm.SetMember{Member: fsm.Member{ID: "n1"}},
		&fsm.Freeze{Slots: []uint16{1}, Epoch: 1, To: 1},
	} {
		b, err := fsm.EncodeEntry(fsm.Entry{Time: 1, Cmd: c})
		if err != nil {
			t.Fatal(err)
		}
		if IsEntry(b) {
			t.Errorf("fsm's %T entry (%x) is taken for the directory's", c, b)
		}
		if _, err := DecodeEntry(b); err == nil {
			t.Errorf("fsm's %T entry decodes as the directory's", c)
		}
	}
	for _, b := range seedEntries(t) {
		if !IsEntry(b) {
			t.Errorf("entry %x is not taken for the directory's", b)
		}
		if _, err := fsm.DecodeEntry(b); err == nil {
			t.Errorf("the directory's entry %x decodes as fsm's", b)
		}
	}
	if IsEntry(nil) {
		t.Error("an empty entry is taken for the directory's")
	}
}

// TestLookup: Lookup is LookupSlot of the namespace's fsm.Slot, and a
// slot past the table is not one.
func TestLookup(t *testing.T) {
	m, _ := fuzzMachine(t)
	for _, ns := range []string{"default", "a", "b", "tenant-17", ""} {
		g, e := m.Lookup(ns)
		g2, e2, ok := m.LookupSlot(fsm.Slot(ns))
		if !ok || g != g2 || e != e2 {
			t.Errorf("Lookup(%q) = %d/%d, LookupSlot(%d) = %d/%d/%v", ns, g, e, fsm.Slot(ns), g2, e2, ok)
		}
	}
	if g, e, ok := m.LookupSlot(fsm.Slots); ok || g != 0 || e != 0 {
		t.Errorf("LookupSlot(%d) = %d/%d/%v", fsm.Slots, g, e, ok)
	}
	if _, ok := m.MoveOf(fsm.Slots); ok {
		t.Errorf("MoveOf(%d) found a move", fsm.Slots)
	}
	// fuzzMachine's slot 5 is flipped to group 1 at epoch 1.
	if g, e, _ := m.LookupSlot(5); g != 1 || e != 1 {
		t.Errorf("slot 5 routes to %d/%d, want 1/1", g, e)
	}
	if gi, ok := m.Group(2); !ok || gi.State != GroupCreating || len(gi.Nonvoters) != 1 {
		t.Errorf("Group(2) = %+v, %v", gi, ok)
	}
	if _, ok := m.Group(9); ok {
		t.Error("Group(9) exists")
	}
}

// TestReservedGroup creates every group id there is: 65535 is reserved,
// so that NextGroup fits a uint16 when none is left.
func TestReservedGroup(t *testing.T) {
	m := New()
	voters := []string{"n1"}
	i := uint64(0)
	for g := 1; g < 65535; g++ {
		i++
		if r := m.ApplyCommand(i, &DirCreateGroup{Group: uint16(g), Voters: voters}); r.Err != nil {
			t.Fatalf("group %d: %v", g, r.Err)
		}
	}
	if n := m.NextGroup(); n != 65535 {
		t.Fatalf("NextGroup = %d", n)
	}
	r := m.ApplyCommand(i+1, &DirCreateGroup{Group: 65535, Voters: voters})
	if !errors.Is(r.Err, &Error{Code: CodeGroupID}) {
		t.Fatalf("group 65535: %v", r.Err)
	}
	checkRoundTrip(t, m)
}

// TestRefusalIsTyped: a refusal is an *Error whose code errors.Is
// matches, and whose message names the bad value.
func TestRefusalIsTyped(t *testing.T) {
	m := New()
	r := m.ApplyCommand(1, &DirMoveBegin{Slots: []uint16{3}, From: 0, To: 7, Epoch: 1})
	var e *Error
	if !errors.As(r.Err, &e) || e.Code != CodeUnknownGroup || !errors.Is(r.Err, &Error{Code: CodeUnknownGroup}) || errors.Is(r.Err, &Error{Code: CodeEpoch}) {
		t.Fatalf("refusal %#v", r.Err)
	}
	if want := "placement: group 7 (to) does not exist"; r.Err.Error() != want {
		t.Errorf("message %q, want %q", r.Err.Error(), want)
	}
	if r := m.ApplyCommand(2, nil); !errors.Is(r.Err, &Error{Code: CodeInvalid}) {
		t.Errorf("a nil command: %v", r.Err)
	}
	if _, err := EncodeEntry(nil); err == nil {
		t.Error("EncodeEntry(nil) did not fail")
	}
	for c := Code(0); c <= numCodes; c++ {
		if c.String() == "" {
			t.Errorf("code %d has no name", c)
		}
	}
}

// TestRestore: Restore replaces the state and the last index, and leaves
// the machine as it was when the section is bad.
func TestRestore(t *testing.T) {
	src, last := fuzzMachine(t)
	b := src.Encode()
	m := New()
	if err := m.Restore(last, b); err != nil {
		t.Fatal(err)
	}
	if dump(m) != dump(src) || m.LastIndex() != last {
		t.Fatal("the restored machine differs")
	}
	if r := m.ApplyCommand(last, &DirSetGroupState{Group: 1, State: GroupDraining}); r.Err == nil {
		t.Error("an entry at the restored index applied")
	}
	bad := append([]byte(nil), b...)
	bad[len(bad)-1] ^= 1
	if err := m.Restore(last+5, bad); err == nil {
		t.Fatal("a bad section restored")
	}
	if dump(m) != dump(src) || m.LastIndex() != last {
		t.Fatal("a refused Restore changed the machine")
	}
	if err := m.Restore(last+6, nil); err != nil || !m.Empty() || m.Encode() != nil {
		t.Fatalf("Restore of no section: %v, empty %v", err, m.Empty())
	}
}

// TestConcurrentReads reads while entries apply (run with -race).
func TestConcurrentReads(t *testing.T) {
	m := New()
	m.ApplyCommand(1, &DirCreateGroup{Group: 1, Voters: []string{"n1"}})
	m.ApplyCommand(2, &DirSetGroupState{Group: 1, State: GroupServing})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				m.Lookup("default")
				m.Groups()
				m.Moves()
				m.MoveOf(7)
				m.Encode()
			}
		}()
	}
	i := uint64(2)
	for e := uint32(1); e <= 50; e++ {
		from, to := uint16(0), uint16(1)
		if e%2 == 0 {
			from, to = 1, 0
		}
		for _, c := range []Command{
			&DirMoveBegin{Slots: []uint16{7, 8}, From: from, To: to, Epoch: e},
			&DirMovePhase{Slots: []uint16{7, 8}, Epoch: e, Phase: PhaseFrozen, FreezeL: uint64(e)},
			&DirMovePhase{Slots: []uint16{7, 8}, Epoch: e, Phase: PhaseImported},
			&DirMovePhase{Slots: []uint16{7, 8}, Epoch: e, Phase: PhaseFlipped},
			&DirMovePhase{Slots: []uint16{7, 8}, Epoch: e, Phase: PhaseDropped},
		} {
			i++
			b := mustEncode(t, c)
			if r, err := m.Apply(i, b); err != nil || r.Err != nil {
				t.Fatalf("epoch %d %T: %v %v", e, c, err, r.Err)
			}
		}
	}
	close(stop)
	wg.Wait()
	if g, e, _ := m.LookupSlot(7); g != 0 || e != 50 {
		t.Fatalf("slot 7 at %d/%d", g, e)
	}
}

package fsm

import (
	"slices"
	"testing"
)

// What the server learns of a move (groups.md §8.2): Applied.Move is set
// by the entries that changed the slots, and only by them (not by a
// repeat, a refusal or another entry); SlotSessions lists the slots'
// open sessions whatever the slots' state; RefusedSessions names the
// known sessions of slots not served.
func TestAppliedMoveAndSlotSessions(t *testing.T) {
	for _, abort := range []bool{false, true} {
		a, b := New(), NewGroup(1)
		idx := uint64(0)
		apply := func(m *Machine, cmd Command) Applied {
			t.Helper()
			idx++
			return m.Apply(idx, Entry{Cmd: cmd})
		}
		open := func(ns string, ttl int64) uint64 {
			t.Helper()
			res := apply(a, &OpenSession{Namespace: ns, TTL: ttl}).Result
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			return res.Session
		}
		s1, other, s2 := open("mv", 1e9), open("stay", 2e9), open("mv", 3e9)
		slots := []uint16{Slot("mv")}
		if Slot("stay") == slots[0] {
			t.Fatal("the test's namespaces share a slot")
		}
		if ap := apply(a, &Request{Session: s1, Namespace: "mv", RequestID: 1, Names: []string{"x"}}); ap.Move != nil {
			t.Fatalf("a request: Move = %+v", ap.Move)
		}
		want := []SlotSession{{s1, 1e9}, {s2, 3e9}}
		if got := a.SlotSessions(slots); !slices.Equal(got, want) {
			t.Fatalf("SlotSessions while owned: %v, want %v", got, want)
		}
		empty := (slots[0] + 1) % Slots
		if empty == Slot("stay") {
			empty = (empty + 1) % Slots
		}
		if got := a.SlotSessions([]uint16{empty}); got != nil {
			t.Fatalf("SlotSessions of a slot without sessions: %v", got)
		}
		if got := a.RefusedSessions([]uint64{s1, other, 999}); got != nil {
			t.Fatalf("RefusedSessions with every slot owned: %v", got)
		}

		if a.SlotsLost() != 0 {
			t.Fatalf("SlotsLost %d before any move", a.SlotsLost())
		}
		if ap := apply(a, &Freeze{Slots: slots, Epoch: 1, To: 5}); ap.Move == nil || ap.Move.Kind != MoveFreeze ||
			!slices.Equal(ap.Move.Slots, slots) || ap.Move.Epoch != 1 || ap.Move.To != 5 {
			t.Fatalf("Freeze: Move = %+v", ap.Move)
		}
		if ap := apply(a, &Freeze{Slots: slots, Epoch: 1, To: 5}); ap.Move != nil || !ap.Result.Duplicate {
			t.Fatalf("a repeated Freeze: %+v, Move = %+v", ap.Result, ap.Move)
		}
		if ap := apply(a, &Freeze{Slots: slots, Epoch: 2, To: 5}); ap.Move != nil || ap.Result.Err == nil {
			t.Fatalf("a refused Freeze: %+v, Move = %+v", ap.Result, ap.Move)
		}
		if got := a.SlotSessions(slots); !slices.Equal(got, want) {
			t.Fatalf("SlotSessions while frozen: %v, want %v", got, want)
		}
		if a.SlotsLost() != 1 {
			t.Fatalf("SlotsLost %d after one Freeze (and its repeat and a refusal), want 1", a.SlotsLost())
		}
		if got := a.RefusedSessions([]uint64{s1, other, 999, s2}); !slices.Equal(got, []uint64{s1, s2}) {
			t.Fatalf("RefusedSessions of a frozen slot: %v, want [%d %d]", got, s1, s2)
		}
		if got := a.UnservedSessions([]uint64{s1, other, 999, s2}); !slices.Equal(got, []uint64{s1, 999, s2}) {
			t.Fatalf("UnservedSessions of a frozen slot: %v, want [%d 999 %d]", got, s1, s2)
		}

		if abort {
			if ap := apply(a, &Unfreeze{Slots: slots, Epoch: 1}); ap.Move == nil || ap.Move.Kind != MoveUnfreeze || ap.Move.Epoch != 1 {
				t.Fatalf("Unfreeze: Move = %+v", ap.Move)
			}
			if ap := apply(a, &Unfreeze{Slots: slots, Epoch: 1}); ap.Move != nil {
				t.Fatalf("a repeated Unfreeze: Move = %+v", ap.Move)
			}
			if got := a.RefusedSessions([]uint64{s1, s2}); got != nil {
				t.Fatalf("RefusedSessions after the Unfreeze: %v", got)
			}
			continue
		}
		x, err := a.Export(slots, 1)
		if err != nil {
			t.Fatal(err)
		}
		if ap := apply(b, &SetGroup{Group: 1}); ap.Move != nil {
			t.Fatalf("SetGroup: Move = %+v", ap.Move)
		}
		for _, c := range x.ImportChunks() {
			if ap := apply(b, c); ap.Move != nil || ap.Result.Err != nil {
				t.Fatalf("ImportChunk: %+v, Move = %+v", ap.Result, ap.Move)
			}
		}
		if got := b.SlotSessions(slots); got != nil {
			t.Fatalf("SlotSessions of staged, not imported, sessions: %v", got)
		}
		if ap := apply(b, x.Import()); ap.Move == nil || ap.Move.Kind != MoveImport || !slices.Equal(ap.Move.Slots, slots) || ap.Move.Epoch != 1 {
			t.Fatalf("Import: %+v, Move = %+v", ap.Result, ap.Move)
		}
		if ap := apply(b, x.Import()); ap.Move != nil || !ap.Result.Duplicate {
			t.Fatalf("a repeated Import: Move = %+v", ap.Move)
		}
		if got := b.SlotSessions(slots); !slices.Equal(got, want) {
			t.Fatalf("SlotSessions after the Import: %v, want %v", got, want)
		}
		if ap := apply(a, &Drop{Slots: slots, Epoch: 1}); ap.Move == nil || ap.Move.Kind != MoveDrop {
			t.Fatalf("Drop: Move = %+v", ap.Move)
		}
		if got := a.SlotSessions(slots); got != nil {
			t.Fatalf("SlotSessions after the Drop: %v", got)
		}
		if a.SlotsLost() != 2 || b.SlotsLost() != 0 {
			t.Fatalf("SlotsLost after a Freeze and a Drop: %d, and %d after an Import; want 2 and 0", a.SlotsLost(), b.SlotsLost())
		}
		if got := a.RefusedSessions([]uint64{s1, other}); got != nil {
			t.Fatalf("RefusedSessions after the Drop: %v (the sessions are unknown)", got)
		}
		if got := a.UnservedSessions([]uint64{s1, other, s2}); !slices.Equal(got, []uint64{s1, s2}) {
			t.Fatalf("UnservedSessions after the Drop: %v, want [%d %d]", got, s1, s2)
		}
	}
}

// MovingError names the namespace's slot, without a target, and reads as
// CodeMoving.
func TestMovingError(t *testing.T) {
	e := MovingError("ns", "moving elsewhere")
	si, ok := e.Slot()
	if e.Code != CodeMoving || !ok || si.Slot != Slot("ns") || si.Known || e.Error() != "moving elsewhere" {
		t.Fatalf("MovingError: %+v %+v %v", e, si, ok)
	}
}

package fsm

import (
	"bytes"
	"strings"
	"testing"
)

// groups.md §17.4: snapshots of machines in the middle of moves (frozen
// slots with their Freezes, a staged import, rejected epochs, a raised
// offset, sessions of other groups' prefixes) restore to machines that
// encode the same bytes and go on alike; and each validation of §6.6
// refuses a snapshot that breaks it.

// movingMachines builds A (group 0) and B (group 1) half-way through two
// moves: "default" moved A → B (B imported it: offset raised, group 0's
// session ids), "b" frozen on A and half staged on B, a rejected move of
// "c" on B, and a session B opened itself. The export of "b" is returned
// for the rest of its import.
func movingMachines(t testing.TB) (a, b *Machine, x *Export, nextA, nextB uint64) {
	t.Helper()
	a, b = New(), NewGroup(1)
	ia, ib := uint64(0), uint64(0)
	do := func(m *Machine, i *uint64, c Command) Result {
		t.Helper()
		*i++
		res := m.Apply(*i, Entry{Time: int64(*i), Cmd: c}).Result
		if res.Err != nil {
			t.Fatalf("%s: %v", fmtCmd(c), res.Err)
		}
		return res
	}
	secret := HashSecret([]byte("s"))
	var sids []uint64
	for _, ns := range []string{"default", "default", "default", "b", "b"} {
		sids = append(sids, do(a, &ia, &OpenSession{Namespace: ns, TTL: 1e9, SecretHash: secret}).Session)
	}
	do(a, &ia, &Request{Session: sids[0], Namespace: "default", RequestID: 1, Names: []string{"x", "y"}})
	do(a, &ia, &Request{Session: sids[1], Namespace: "default", RequestID: 1, Names: []string{"x"}})
	do(a, &ia, &Request{Session: sids[1], Namespace: "default", RequestID: 2, Names: []string{"s"}, Mode: Shared, MaxHolders: 2})
	do(a, &ia, &SetRecord{Session: sids[0], Namespace: "default", RequestID: 1, Token: 6, Name: "x", Value: []byte("v")})
	do(a, &ia, &CloseSession{Session: sids[2], Namespace: "default"}) // a tombstone that moves
	do(a, &ia, &Request{Session: sids[3], Namespace: "b", RequestID: 1, Names: []string{"x"}})
	do(a, &ia, &Request{Session: sids[4], Namespace: "b", RequestID: 1, Names: []string{"x"}})
	do(a, &ia, &CloseSession{Session: sids[4], Namespace: "b"})
	ia = 100
	do(a, &ia, &Freeze{Slots: []uint16{Slot("default")}, Epoch: 1, To: 1})
	x1, err := a.Export([]uint16{Slot("default")}, 1)
	if err != nil {
		t.Fatal(err)
	}
	do(b, &ib, &SetGroup{Group: 1})
	for _, c := range x1.ImportChunks() {
		do(b, &ib, c)
	}
	do(b, &ib, x1.Import())
	do(a, &ia, &Drop{Slots: []uint16{Slot("default")}, Epoch: 1})
	do(b, &ib, &OpenSession{Namespace: "default", TTL: 1e9, SecretHash: secret})
	do(b, &ib, &Reject{Slots: []uint16{Slot("c")}, Epoch: 4})
	do(a, &ia, &Freeze{Slots: []uint16{Slot("b")}, Epoch: 1, To: 1})
	a.exportChunk = 1
	x, err = a.Export([]uint16{Slot("b")}, 1)
	a.exportChunk = 0
	if err != nil || len(x.Chunks) < 3 {
		t.Fatalf("%v, %d chunks", err, len(x.Chunks))
	}
	do(b, &ib, x.ImportChunks()[0])
	do(b, &ib, x.ImportChunks()[1])
	if b.st.offset == 0 || b.st.ownsAll || len(b.st.mv.staging) != 1 || len(b.st.mv.rejected) != 1 || len(a.st.mv.out) != 1 {
		t.Fatalf("not the state wanted: offset %d, staging %d, rejected %d", b.st.offset, len(b.st.mv.staging), len(b.st.mv.rejected))
	}
	return a, b, x, ia, ib
}

// restoreAs restores snapshot s into a new machine of group g.
func restoreAs(t *testing.T, g uint16, s []byte) *Machine {
	t.Helper()
	m := NewGroup(g)
	if err := m.Restore(bytes.NewReader(s)); err != nil {
		t.Fatal(err)
	}
	if again := m.Snapshot(); !bytes.Equal(again, s) {
		t.Fatal("a restored machine encodes other bytes")
	}
	if err := checkState(m.st); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMoveSnapshotRoundTrip(t *testing.T) {
	a, b, x, ia, ib := movingMachines(t)
	// B holds tokens and indexes above its raw last index (they are
	// logical, and the offset was raised): the bounds are L's (§6.6).
	if r := b.st.namespaces["default"].heldTail; r.index <= b.LastIndex() {
		t.Fatalf("the imported request's index %d is not above B's raw last index %d", r.index, b.LastIndex())
	}
	a2, b2 := restoreAs(t, 0, a.Snapshot()), restoreAs(t, 1, b.Snapshot())
	if _, v, _ := SnapshotHeader(b.Snapshot()); v != 5 {
		t.Fatalf("format %d", v)
	}
	// The restored source exports the same bytes; the restored target
	// goes on with the staged chunks and ends like the original.
	x2, err := a2.Export(x.Slots, x.Epoch)
	a2.exportChunk = 1
	x3, _ := a2.Export(x.Slots, x.Epoch)
	if err != nil || x2.SHA256 == x.SHA256 || x3.SHA256 != x.SHA256 {
		t.Fatalf("re-export after restore: %v (the chunk bound changes the bytes; the same bound gives the same)", err)
	}
	for _, m := range []*Machine{b, b2} {
		i := ib
		for _, c := range x.ImportChunks()[2:] {
			i++
			if res := m.Apply(i, Entry{Cmd: c}).Result; res.Err != nil {
				t.Fatal(res.Err)
			}
		}
		i++
		if res := m.Apply(i, Entry{Cmd: x.Import()}).Result; res.Err != nil {
			t.Fatal(res.Err)
		}
		i++
		m.Apply(i, Entry{Cmd: &Release{Session: 3, Namespace: "b", RequestID: 1}})
	}
	if b.Digest() != b2.Digest() {
		t.Fatal("the restored target ended otherwise")
	}
	if err := checkState(b.st); err != nil {
		t.Fatal(err)
	}
	// Sessions of group 0 (imported, ids below the group's own prefix) and
	// the one B opened are in id order; the moved tombstone answers
	// "closed" to its secret on B.
	if err := checkSessionOrder(b.st); err != nil {
		t.Fatal(err)
	}
	if err := b.CheckSession(3, "default", []byte("s")); err == nil || err.Code != CodeSessionClosed {
		t.Fatalf("the moved tombstone: %v", err)
	}
	for _, m := range []*Machine{a, a2} {
		if res := m.Apply(ia+1, Entry{Cmd: &Drop{Slots: x.Slots, Epoch: 1}}).Result; res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	if a.Digest() != a2.Digest() || a.Stats().Sessions != 0 {
		t.Fatalf("the sources differ after Drop: %+v", a.Stats())
	}
}

// TestMoveSnapshotRefusals: each validation of groups.md §6.6 and of the
// moves section refuses a snapshot that breaks it (the state is made
// wrong in place, encoded, and must not decode).
func TestMoveSnapshotRefusals(t *testing.T) {
	cases := []struct {
		name, want string
		source     bool // break A (group 0, a frozen slot) instead of B
		breakIt    func(st *state)
	}{
		{"token past L(last index)", "past last index", false, func(st *state) {
			st.namespaces["default"].heldHead.token = st.logical(st.lastIndex) + 1
		}},
		{"request index past L(last index)", "outside", false, func(st *state) {
			st.namespaces["default"].heldHead.index = st.logical(st.lastIndex) + 1
		}},
		{"record index past L(last index)", "record of", false, func(st *state) {
			for _, rec := range st.namespaces["default"].records {
				rec.Index = st.logical(st.lastIndex) + 1
			}
		}},
		{"own session newer than the last index", "newer than its last index", false, func(st *state) {
			s := st.ownLast
			delete(st.sessions, s.id)
			s.id = sessionID(1, st.lastIndex+1)
			st.sessions[s.id] = s
		}},
		{"request index below its session's raw part", "outside", false, func(st *state) {
			r := st.namespaces["default"].heldHead
			r.index = r.sess.id&rawMask - 1
		}},
		{"a namespace on a slot not served", "does not serve", false, func(st *state) {
			st.slots[Slot("default")] = slotState{kind: slotGone, to: 2, epoch: 7}
		}},
		{"a staged request of a session not staged", "staged chunk", false, func(st *state) {
			for _, sg := range st.mv.staging {
				en := encoder{}
				en.byte1(tagRequest)
				en.uvarint(1) // a live session of B, not a staged one
				en.uvarint(1)
				en.uvarint(5)
				en.uvarint(1)
				en.str("x")
				en.b = append(en.b, 0, 0, 0, 0, 0, 0, 0)
				sg.chunks = append(sg.chunks, en.b)
			}
		}},
		{"a staged chunk that does not decode", "staged chunk", false, func(st *state) {
			for _, sg := range st.mv.staging {
				sg.chunks = append(sg.chunks, []byte{99})
			}
		}},
		{"a stage on a slot owned", "cannot import", false, func(st *state) {
			for _, sg := range st.mv.staging {
				st.slots[sg.slots[0]] = slotState{kind: slotOwned, epoch: 1}
			}
		}},
		{"a stage at a rejected epoch", "rejected", false, func(st *state) {
			for _, sg := range st.mv.staging {
				st.mv.rejected[sg.slots[0]] = sg.epoch
			}
		}},
		{"a frozen slot without its Freeze", "without its Freeze", true, func(st *state) {
			st.mv.out = nil
		}},
		{"a Freeze that does not match its slot", "does not match", true, func(st *state) {
			for _, o := range st.mv.out {
				o.to = 5
			}
		}},
		{"a Freeze's floor past L(last index)", "floor", true, func(st *state) {
			for _, o := range st.mv.out {
				o.floorL = st.logical(st.lastIndex) + 1
			}
		}},
		{"a Freeze's tombstone of another slot", "tombstone", true, func(st *state) {
			for _, o := range st.mv.out {
				o.tombs = append(o.tombs, tombstone{id: 99, ns: "zz", secret: "s"})
			}
		}},
		{"SetGroup in group 0", "SetGroup", true, func(st *state) {
			st.mv.groupSet = true
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b, _, _, _ := movingMachines(t)
			m := b
			if c.source {
				m = a
			}
			if _, err := decodeState(m.Snapshot()); err != nil {
				t.Fatalf("before breaking it: %v", err)
			}
			c.breakIt(m.st)
			_, err := decodeState(m.Snapshot())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}

// TestMoveSnapshotCOW: an Import (with the requests it lets in after)
// and a Drop applied while a snapshot is encoded, at every object the
// encoder visits, leave the snapshot the state at its point
// (copy-on-write, cow.go): the bytes equal those of a snapshot taken at
// the point with nothing applied.
func TestMoveSnapshotCOW(t *testing.T) {
	for k := 1; ; k++ {
		a, b, x, ia, ib := movingMachines(t)
		steps := map[*Machine]func(){
			b: func() {
				i := ib
				for _, c := range append(append([]Command{}, commandsOf(x.ImportChunks()[2:])...), x.Import(),
					&Release{Session: 4, Namespace: "b", RequestID: 1},
					&OpenSession{Namespace: "b", TTL: 1e9},
					&Request{Session: 1, Namespace: "default", RequestID: 9, Names: []string{"x"}}) {
					i++
					if res := b.Apply(i, Entry{Cmd: c}).Result; res.Err != nil {
						t.Fatalf("%s: %v", fmtCmd(c), res.Err)
					}
				}
			},
			a: func() {
				if res := a.Apply(ia+1, Entry{Cmd: &Drop{Slots: x.Slots, Epoch: 1}}).Result; res.Err != nil {
					t.Fatal(res.Err)
				}
			},
		}
		reached := 0
		for m, step := range steps {
			want := m.Snapshot()
			sn := m.BeginSnapshot()
			m.snapChunk = 1
			n := 0
			m.snapYield = func() {
				if n++; n == k { // the encoder let the read lock go
					step()
				}
			}
			got, err := sn.Encode()
			m.snapYield = nil
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("a move entry at object %d changed the snapshot being encoded", k)
			}
			if err := checkState(m.st); err != nil {
				t.Fatal(err)
			}
			if n >= k {
				reached++
			}
		}
		if reached == 0 {
			if k < 10 {
				t.Fatalf("only %d objects encoded", k)
			}
			return // k is past every object of both
		}
	}
}

func commandsOf(cs []*ImportChunk) []Command {
	out := make([]Command, len(cs))
	for i, c := range cs {
		out[i] = c
	}
	return out
}

package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// The groups groundwork (groups.go). TestGroupZeroIsByteIdentical
// (golden_history_test.go) shows that group 0 is unchanged; these test
// what group 0 never reaches: another group, an offset, foreign session
// ids and slots not owned.

// Slot is part of the data format: these values never change. They were
// checked against a bitwise CRC-32C written apart from Go's (polynomial
// 0x82F63B78, reflected): CRC-32C("123456789") = 0xe3069283 is the
// standard check value.
func TestSlotIsStable(t *testing.T) {
	for ns, want := range map[string]uint16{
		"":            0x000,
		"a":           0x330, // 0xc1d04330
		"123456789":   0x283, // 0xe3069283
		"default":     0x1e5, // 0x1a4311e5
		"orders":      0x08a, // 0x09a7c08a
		"tenant-4711": 0x027, // 0xfe027027
	} {
		if got := Slot(ns); got != want {
			t.Errorf("Slot(%q) = %#x, want %#x: the slot hash changed", ns, got, want)
		}
	}
}

// Namespaces spread over every slot about evenly.
func TestSlotDistribution(t *testing.T) {
	const n = 200_000
	var count [Slots]int
	for i := 0; i < n; i++ {
		count[Slot(fmt.Sprintf("ns-%d", i))]++
	}
	lo, hi := n, 0
	for _, c := range count {
		lo, hi = min(lo, c), max(hi, c)
	}
	// Mean 48.8, σ ≈ 7: [lo, hi] well inside [15, 90] for a fair hash.
	if lo < 15 || hi > 90 {
		t.Fatalf("slot counts range over [%d, %d] for %d namespaces in %d slots", lo, hi, n, Slots)
	}
}

// mustCode checks that err is an *Error of code c and returns it.
func mustCode(t *testing.T, what string, err error, c Code) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code != c {
		t.Fatalf("%s: %v, want %s", what, err, c)
	}
	return e
}

// A group that owns no slot (every group g ≥ 1 when built) refuses every
// namespace-scoped command with CodeMoving, changing nothing and telling
// nobody; the group-level commands apply.
func TestGroupOneRefusesEveryNamespace(t *testing.T) {
	m := NewGroup(1)
	m.KeepChanges(true)
	if m.Group() != 1 {
		t.Fatalf("group %d", m.Group())
	}
	cmds := []Command{
		&OpenSession{Namespace: "n", TTL: 1e9},
		&CloseSession{Session: 1, Namespace: "n"},
		&Request{Session: 1, Namespace: "n", RequestID: 1, Names: []string{"a"}},
		&Release{Session: 1, Namespace: "n", RequestID: 1},
		&Abort{Session: 1, Namespace: "n", RequestID: 1},
		&SetRecord{Session: 1, Namespace: "n", RequestID: 1, Token: 1, Name: "a", Value: []byte("v")},
		&Request{Session: 1, Namespace: "", RequestID: 1, Names: []string{"a"}}, // invalid too: moving first
	}
	idx := uint64(0)
	for _, cmd := range cmds {
		idx++
		ap := m.Apply(idx, Entry{Time: 1, Cmd: cmd})
		e := mustCode(t, fmt.Sprintf("%T", cmd), ap.Result.Err, CodeMoving)
		si, ok := e.Slot()
		if _, ns, _ := namespaceOf(cmd); !ok || si.Known || si.Slot != Slot(ns) {
			t.Fatalf("%T: slot %+v, %v", cmd, si, ok)
		}
		if len(ap.Events) != 0 || len(ap.Changes) != 0 {
			t.Fatalf("%T: events %v, changes %v", cmd, ap.Events, ap.Changes)
		}
		if pe := m.Precheck(cmd); pe == nil || pe.Code != CodeMoving {
			t.Fatalf("Precheck(%T) = %v", cmd, pe)
		}
	}
	// ExpireSession names no namespace: an unknown session is closed.
	idx++
	if ap := m.Apply(idx, Entry{Cmd: &ExpireSession{Session: 1}}); ap.Result.Err != nil || !ap.Result.Duplicate {
		t.Fatalf("expire: %+v", ap.Result)
	}
	if st := m.Stats(); st.Namespaces+st.Sessions+st.Held+st.Pending != 0 {
		t.Fatalf("stats %+v", st)
	}
	// The reads.
	mustCode(t, "CheckSession", m.CheckSession(1, "n", nil), CodeMoving)
	mustCode(t, "Owns", m.Owns("n"), CodeMoving)
	if q := m.Query("n"); len(q.Held)+len(q.Pending) != 0 {
		t.Fatal(q)
	}
	if _, _, ok := m.Record("n", "a"); ok {
		t.Fatal("a record")
	}
	if m.SessionsIn("n") != 0 || len(m.Sessions()) != 0 {
		t.Fatal("sessions")
	}
	// Group-level entries apply.
	idx++
	if ap := m.Apply(idx, Entry{Cmd: &SetMember{Member: Member{ID: "m1"}}}); ap.Result.Err != nil {
		t.Fatal(ap.Result.Err)
	}
	idx++
	if ap := m.Apply(idx, Entry{Cmd: &SetClusterSecret{Secret: secretA}}); ap.Result.Err != nil {
		t.Fatal(ap.Result.Err)
	}
	// Its snapshot is format 5, restores into group 1 only.
	snap := m.Snapshot()
	if _, v, _ := SnapshotHeader(snap); v != 5 || m.UsedLevel() != LevelGroups {
		t.Fatalf("format %d, used level %d", v, m.UsedLevel())
	}
	m2 := NewGroup(1)
	if err := m2.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m2.Snapshot(), snap) {
		t.Fatal("the restored group 1 encodes otherwise")
	}
	for _, other := range []*Machine{New(), NewGroup(2)} {
		if err := other.Restore(bytes.NewReader(snap)); err == nil {
			t.Fatalf("group 1's snapshot restored into group %d", other.Group())
		}
	}
	if err := m2.Restore(bytes.NewReader(New().Snapshot())); err == nil {
		t.Fatal("group 0's snapshot restored into group 1")
	}
}

// setSlot sets the slot of namespace ns in m's table (phase 2's entries
// will; tests only until then).
func setSlot(m *Machine, ns string, ss slotState) {
	m.st.slots[Slot(ns)] = ss
	m.st.computeOwnsAll()
}

// A session whose slot is moving out answers "moving" in every apply and
// read that reaches it, never "closed", and nothing changes; a slot gone
// answers "moved".
func TestFrozenAndGoneSlotsRefuse(t *testing.T) {
	m := New()
	m.KeepChanges(true)
	open := m.Apply(1, Entry{Cmd: &OpenSession{Namespace: "n", TTL: 1e9, SecretHash: HashSecret([]byte("s"))}})
	sid := open.Result.Session
	if g := m.Apply(2, Entry{Cmd: &Request{Session: sid, Namespace: "n", RequestID: 1, Names: []string{"a"}}}); g.Result.Status != StatusGranted {
		t.Fatal(g.Result)
	}
	before := m.Snapshot()
	setSlot(m, "n", slotState{kind: slotFrozen, to: 3, epoch: 7})
	idx := uint64(2)
	for _, cmd := range []Command{
		&Request{Session: sid, Namespace: "n", RequestID: 2, Names: []string{"b"}},
		&Release{Session: sid, Namespace: "n", RequestID: 1},
		&Abort{Session: sid, Namespace: "n", RequestID: 1},
		&SetRecord{Session: sid, Namespace: "n", RequestID: 1, Token: 2, Name: "a"},
		&CloseSession{Session: sid, Namespace: "n"},
		&ExpireSession{Session: sid},
		&OpenSession{Namespace: "n", TTL: 1e9},
	} {
		idx++
		ap := m.Apply(idx, Entry{Cmd: cmd})
		e := mustCode(t, fmt.Sprintf("%T", cmd), ap.Result.Err, CodeMoving)
		if si, ok := e.Slot(); !ok || si != (SlotInfo{Slot: Slot("n"), To: 3, Epoch: 7, Known: true}) {
			t.Fatalf("%T: %+v", cmd, si)
		}
		if len(ap.Events)+len(ap.Changes) != 0 {
			t.Fatalf("%T: events %v changes %v", cmd, ap.Events, ap.Changes)
		}
	}
	mustCode(t, "CheckSession", m.CheckSession(sid, "n", []byte("s")), CodeMoving)
	mustCode(t, "OwnsSession", m.OwnsSession(sid), CodeMoving)
	if _, _, ok := m.SessionRequests(sid); ok {
		t.Fatal("SessionRequests of a moving session")
	}
	if _, ok := m.Outcome(sid, "n", 1); ok {
		t.Fatal("Outcome of a moving session")
	}
	if len(m.Sessions()) != 0 {
		t.Fatal("a moving session is re-armed")
	}
	if m.OwnsSession(sid+1000) != nil || m.Owns("other") != nil {
		t.Fatal("another slot refused")
	}
	setSlot(m, "n", slotState{kind: slotGone, to: 3, epoch: 7})
	idx++
	mustCode(t, "gone", m.Apply(idx, Entry{Cmd: &Request{Session: sid, Namespace: "n", RequestID: 2, Names: []string{"b"}}}).Result.Err, CodeMoved)
	if !errors.Is(m.Owns("n"), errMoved) || !errors.Is(NewGroup(1).Owns("n"), errMoving) {
		t.Fatal("errors.Is")
	}
	// Back to owned (as an Unfreeze would make it): nothing had changed
	// but the last index.
	setSlot(m, "n", slotState{kind: slotOwned})
	m2 := New()
	if err := m2.Restore(bytes.NewReader(before)); err != nil {
		t.Fatal(err)
	}
	m2.st.lastIndex = m.st.lastIndex
	if m.Digest() != m2.Digest() {
		t.Fatal("a refused command changed the state")
	}
}

// addSession links a session of any id into st, as an Import will: an
// internal test helper.
func addSession(st *state, id uint64, ns string) *session {
	n := st.namespaces[ns]
	if n == nil {
		n = st.newNamespace(ns)
		st.namespaces[ns] = n
	}
	n.sessions++
	s := &session{id: id, ns: n, clientID: itoa(id), ttl: 1e9}
	st.sessions[id] = s
	st.linkSession(s)
	return s
}

// Sessions stay in id order with other groups' ids among them: a local
// open goes before the sessions of higher groups, others where their id
// says; closing keeps ownLast right. The snapshot (format 5) restores it.
func TestOrderedSessionInsert(t *testing.T) {
	m := NewGroup(2)
	m.st.ownAllSlots() // as if imported: opens apply
	m.st.slots[0].epoch = 1
	st := m.st
	check := func(what string) {
		t.Helper()
		if err := checkSessionOrder(st); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var want *session
		for s := st.sessHead; s != nil; s = s.newer {
			if sessionGroup(s.id) == 2 {
				want = s
			}
		}
		if st.ownLast != want {
			t.Fatalf("%s: ownLast %v, want %v", what, st.ownLast, want)
		}
	}
	idx := uint64(100)
	open := func() uint64 {
		idx++
		ap := m.Apply(idx, Entry{Cmd: &OpenSession{Namespace: "n", TTL: 1e9}})
		if ap.Result.Err != nil {
			t.Fatal(ap.Result.Err)
		}
		if ap.Result.Session != sessionID(2, idx) || ap.Result.ClientID != itoa(sessionID(2, idx)) {
			t.Fatalf("session %d client %s at index %d", ap.Result.Session, ap.Result.ClientID, idx)
		}
		return ap.Result.Session
	}
	addSession(st, sessionID(3, 5), "m") // only a higher group's: the first own goes before it
	check("higher")
	a := open()
	check("first own")
	addSession(st, sessionID(1, 7), "m")
	addSession(st, sessionID(0, 900), "m")
	addSession(st, sessionID(4, 1), "m")
	addSession(st, sessionID(3, 2), "m")
	check("foreign")
	b := open()
	c := open()
	check("own")
	addSession(st, sessionID(2, 50), "m") // an own id imported back, below the local ones
	check("own, imported")
	if st.sessHead.id != sessionID(0, 900) || st.sessTail.id != sessionID(4, 1) || st.ownLast.id != c {
		t.Fatalf("head %d tail %d ownLast %d", st.sessHead.id, st.sessTail.id, st.ownLast.id)
	}
	// Close the last own one, then all own ones: ownLast follows.
	for _, id := range []uint64{c, a} {
		idx++
		if ap := m.Apply(idx, Entry{Cmd: &CloseSession{Session: id, Namespace: "n"}}); ap.Result.Err != nil {
			t.Fatal(ap.Result.Err)
		}
		check(fmt.Sprintf("closed %d", id))
	}
	d := open()
	check("reopened")
	// During a snapshot, the inserts keep the point's order (copy-on-write
	// of the neighbours).
	sn := m.BeginSnapshot()
	open()
	addSession(st, sessionID(1, 8), "m")
	got, err := sn.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, v, _ := SnapshotHeader(got); v != 5 {
		t.Fatalf("format %d", v)
	}
	m2 := NewGroup(2)
	if err := m2.Restore(bytes.NewReader(got)); err != nil {
		t.Fatal(err)
	}
	if err := checkSessionOrder(m2.st); err != nil || m2.st.ownLast == nil || m2.st.ownLast.id != d {
		t.Fatalf("restored: %v, ownLast %v", err, m2.st.ownLast)
	}
	if len(m2.st.sessions) != 8 || b == 0 {
		t.Fatalf("%d sessions restored", len(m2.st.sessions))
	}
	check("after")
	// A whole restore of the live state encodes alike.
	m3 := NewGroup(2)
	if err := m3.Restore(bytes.NewReader(m.Snapshot())); err != nil {
		t.Fatal(err)
	}
	if m3.Digest() != m.Digest() {
		t.Fatal("the restored state differs")
	}
}

// With an offset (which phase 2's Import will raise), every token and
// index a client sees is logical; raft's indexes stay raw.
func TestLogicalIndexes(t *testing.T) {
	m := New()
	const off = 1_000_000
	m.st.offset = off
	m.offset.Store(off) // as an Import would leave it (applyLocked)
	if m.Logical(5) != 5+off || m.LastLogical() != off {
		t.Fatalf("Logical(5) = %d, LastLogical = %d", m.Logical(5), m.LastLogical())
	}
	m.KeepChanges(true)
	sid := m.Apply(1, Entry{Cmd: &OpenSession{Namespace: "n", TTL: 1e9}}).Result.Session
	if sid != 1 {
		t.Fatalf("session id %d: ids are raw", sid)
	}
	g := m.Apply(2, Entry{Cmd: &Request{Session: sid, Namespace: "n", RequestID: 1, Names: []string{"a"}}})
	if g.Result.Token != 2+off || g.Events[0].Token != 2+off || g.Changes[0].Token != 2+off {
		t.Fatalf("grant: %+v %+v", g.Result, g.Events)
	}
	w := m.Apply(3, Entry{Cmd: &SetRecord{Session: sid, Namespace: "n", RequestID: 1, Token: 2 + off, Name: "a", Value: []byte("v")}})
	if w.Result.Err != nil || w.Result.Record.Index != 3+off || w.Result.Record.Token != 2+off {
		t.Fatalf("record: %+v", w.Result)
	}
	q := m.Apply(4, Entry{Cmd: &Request{Session: sid, Namespace: "n", RequestID: 2, Names: []string{"a"}}})
	if q.Result.Status != StatusQueued || m.st.requests[reqKey{sid, 2}].index != 4+off {
		t.Fatalf("queued: %+v", q.Result)
	}
	if _, at, ok := m.Record("n", "a"); !ok || at != 4+off {
		t.Fatalf("Record read at %d", at)
	}
	if _, _, at := m.QueryMatching("n", nil); at != 4+off || m.LastIndex() != 4 || m.LastLogical() != 4+off {
		t.Fatalf("QueryMatching at %d, last %d, %d", at, m.LastIndex(), m.LastLogical())
	}
	if r := m.Apply(5, Entry{Cmd: &Release{Session: sid, Namespace: "n", RequestID: 1, Token: 2 + off}}); r.Result.Err != nil || r.Events[0].Token != 5+off {
		t.Fatalf("release: %+v %+v", r.Result, r.Events)
	}
	// The snapshot carries the offset (format 5); its logical tokens pass
	// the restated bounds.
	snap := m.Snapshot()
	if _, v, _ := SnapshotHeader(snap); v != 5 {
		t.Fatalf("format %d", v)
	}
	m2 := New()
	if err := m2.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if m2.LastLogical() != 5+off || m2.Logical(7) != 7+off || m2.Digest() != m.Digest() {
		t.Fatal("the offset did not survive the snapshot")
	}
	// The same state without its offset has tokens from the future.
	st, err := decodeState(snap)
	if err != nil {
		t.Fatal(err)
	}
	st.offset = 0
	if err := checkScheduling(st); err == nil {
		t.Fatal("tokens past the raw last index accepted without the offset")
	}
}

// Raw indexes stop below 2^48: session ids keep the group in their top
// 16 bits.
func TestRawIndexBound(t *testing.T) {
	m := New()
	ap := m.Apply(MaxRawIndex, Entry{Cmd: &OpenSession{Namespace: "n", TTL: 1e9}})
	mustCode(t, "Apply", ap.Result.Err, CodeInvalid)
	if m.LastIndex() != 0 || m.Stats().Sessions != 0 {
		t.Fatal("an index past 2^48 changed the state")
	}
	b, err := EncodeEntry(Entry{Cmd: &OpenSession{Namespace: "n", TTL: 1e9}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.ApplyBytes(MaxRawIndex+5, b); err == nil {
		t.Fatal("ApplyBytes past 2^48: no error")
	}
	if ap := m.Apply(MaxRawIndex-1, Entry{Cmd: &OpenSession{Namespace: "n", TTL: 1e9}}); ap.Result.Err != nil || ap.Result.Session != MaxRawIndex-1 {
		t.Fatalf("%+v", ap.Result)
	}
}

// The group entry types (entry.go, move_cmd.go) keep their numbers and
// names, are decoded and applied since phase 2, and stay above this
// build's ProtocolLevel (LevelGroups), so no gate admits them yet; an
// entry of one of them is never ignore-if-unknown.
func TestGroupEntryTypesAreAboveTheLevel(t *testing.T) {
	want := map[EntryType]string{11: "SetGroup", 12: "Freeze", 13: "ImportChunk", 14: "Import", 15: "Reject", 16: "Unfreeze", 17: "Drop"}
	for typ, name := range want {
		if typ.String() != name || typeNames[typ] != name {
			t.Errorf("type %d is %s, want %s", typ, typ, name)
		}
		c := newCmd(typ)
		if c == nil || c.Type() != typ {
			t.Errorf("%s is not decoded", typ)
		}
		if EntryLevel(typ) != LevelGroups || EntryLevel(typ) <= ProtocolLevel {
			t.Errorf("%s is at level %d", typ, EntryLevel(typ))
		}
	}
}

// Format 5 is written only for a state that needs it: one that restores
// to the default group state is refused (equal states, equal bytes).
func TestSnapshotFormat5OnlyWhenNeeded(t *testing.T) {
	m := New()
	m.st.offset = 1
	b := m.Snapshot()
	m.st.offset = 0
	if _, v, _ := SnapshotHeader(m.Snapshot()); v != 2 {
		t.Fatalf("default state: format %d", v)
	}
	// Patch the offset to 0 in the format-5 bytes: it must be refused.
	// The groups section is the last: group (0), offset (1), runs (1),
	// one run of 4096 owned at epoch 0; then the CRC.
	body := bytes.Clone(b[:len(b)-4])
	// The moves section (move_snap.go) follows, empty: 4 zero counts.
	tail := []byte{0, 1, 1, 0x80, 0x20, byte(slotOwned), 0, 0, 0, 0, 0, 0}
	if !bytes.HasSuffix(body, tail) {
		t.Fatalf("unexpected groups section % x", body[len(body)-len(tail):])
	}
	body[len(body)-len(tail)+1] = 0
	_, err := decodeState(withCRC(append(body, 0, 0, 0, 0)))
	if err == nil || !strings.Contains(err.Error(), "default group state") {
		t.Fatalf("a format-5 snapshot of the default state: %v", err)
	}
	if _, err := decodeState(b); err != nil {
		t.Fatal(err)
	}
}

// groupSnapshots are snapshots of non-default group states: format 5.
func groupSnapshots(tb testing.TB) [][]byte {
	var out [][]byte
	g1 := NewGroup(1)
	out = append(out, g1.Snapshot())
	m := NewGroup(2)
	m.st.ownAllSlots()
	m.st.slots[7] = slotState{kind: slotFrozen, to: 3, epoch: 9}
	m.st.mv.out = map[uint16]*outMove{7: {slots: []uint16{7}, epoch: 9, to: 3, floorL: 1}} // its Freeze (move_state.go)
	m.st.slots[8] = slotState{kind: slotGone, to: 1, epoch: 4}
	m.st.slots[9] = slotState{kind: slotAbsent}
	m.st.computeOwnsAll()
	m.st.offset = 40
	addSession(m.st, sessionID(1, 3), "n")
	sid := m.Apply(10, Entry{Cmd: &OpenSession{Namespace: "n", TTL: 1e9}}).Result.Session
	m.Apply(11, Entry{Cmd: &Request{Session: sid, Namespace: "n", RequestID: 1, Names: []string{"a"}}})
	m.Apply(12, Entry{Cmd: &Request{Session: sid, Namespace: "n", RequestID: 2, Names: []string{"a"}}})
	m.Apply(13, Entry{Cmd: &SetRecord{Session: sid, Namespace: "n", RequestID: 1, Token: 51, Name: "a", Value: []byte("v")}})
	addSession(m.st, sessionID(3, 1), "n")
	out = append(out, m.Snapshot())
	for _, b := range out {
		if _, v, _ := SnapshotHeader(b); v != 5 {
			tb.Fatalf("seed of format %d", v)
		}
	}
	return out
}

// FuzzRestoreGroups: no snapshot, format 5 included, panics the decoder,
// and whatever it restores encodes to bytes that restore to the same.
func FuzzRestoreGroups(f *testing.F) {
	for _, b := range groupSnapshots(f) {
		f.Add(b)
	}
	a, b, _, _, _ := movingMachines(f) // moves in progress (move_snapshot_test.go)
	f.Add(a.Snapshot())
	f.Add(b.Snapshot())
	f.Add(New().Snapshot())
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) >= 4 { // get past the CRC: fix it
			b = withCRC(bytes.Clone(b))
		}
		st, err := decodeState(b)
		if err != nil {
			return
		}
		m := NewGroup(st.group)
		m.st = st
		if err := checkState(st); err != nil {
			t.Fatal(err)
		}
		if err := checkSessionOrder(st); err != nil {
			t.Fatal(err)
		}
		once := m.Snapshot()
		st2, err := decodeState(once)
		if err != nil {
			t.Fatalf("a restored state does not restore again: %v", err)
		}
		m2 := NewGroup(st2.group)
		m2.st = st2
		if !bytes.Equal(m2.Snapshot(), once) {
			t.Fatal("a restored state encodes otherwise")
		}
	})
}

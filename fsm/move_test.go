package fsm

import (
	"bytes"
	"testing"
	"time"
)

// Unit tests of the move entries that the scenarios and the property test
// do not reach: SetGroup of another group, the chunk bounds, Export
// beside a snapshot, and the chunk decoder under fuzzing.

// A SetGroup of another group stops the replica (ApplyBytes' error, as
// for an undecodable entry) and Apply refuses it without moving the last
// index; group 0's SetGroup{0} leaves its state the default (I4).
func TestSetGroupOfAnotherGroup(t *testing.T) {
	m := NewGroup(2)
	b, err := EncodeEntry(Entry{Cmd: &SetGroup{Group: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.ApplyBytes(1, b); err == nil {
		t.Fatal("ApplyBytes applied another group's SetGroup")
	}
	if res := m.Apply(1, Entry{Cmd: &SetGroup{Group: 3}}).Result; res.Err == nil || m.LastIndex() != 0 || m.st.mv.groupSet {
		t.Fatalf("Apply: %+v, last index %d", res, m.LastIndex())
	}
	if res := m.Apply(1, Entry{Cmd: &SetGroup{Group: 2}}).Result; res.Err != nil || !m.st.mv.groupSet {
		t.Fatalf("its own SetGroup: %+v", res)
	}
	z := New()
	before := stateBytes(z)
	if res := z.Apply(1, Entry{Cmd: &SetGroup{Group: 0}}).Result; res.Err != nil || !res.Duplicate {
		t.Fatalf("SetGroup{0} in group 0: %+v", res)
	}
	if _, v, _ := SnapshotHeader(z.Snapshot()); v != 2 || !bytes.Equal(before, stateBytes(z)) {
		t.Fatalf("SetGroup{0} changed group 0's state (format %d)", v)
	}
	if CommandLevel(&Freeze{}) != LevelGroups || CommandLevel(&SetGroup{}) <= ProtocolLevel {
		t.Fatal("the move entries are not at LevelGroups, above this build's level")
	}
}

// The chunker cuts at the object count and at the byte bound (an object
// bigger than the bound goes alone); an export of many objects is cut
// at ChunkObjects.
func TestChunkBounds(t *testing.T) {
	c := chunker{objects: 3, bytes: 100}
	for i := 0; i < 10; i++ {
		n := 30
		if i == 5 {
			n = 250
		}
		c.object(func(en *encoder) { en.b = append(en.b, bytes.Repeat([]byte{byte(i)}, n)...) })
	}
	var sizes []int
	for _, ch := range c.done() {
		sizes = append(sizes, len(ch))
	}
	want := []int{90, 60, 250, 90, 30}
	if len(sizes) != len(want) {
		t.Fatalf("chunks of %v bytes, want %v", sizes, want)
	}
	for i := range want {
		if sizes[i] != want[i] {
			t.Fatalf("chunks of %v bytes, want %v", sizes, want)
		}
	}
	m := New()
	sid := m.Apply(1, Entry{Cmd: &OpenSession{Namespace: "n", TTL: 1e9}}).Result.Session
	const locks = ChunkObjects + 100
	for i := uint64(0); i < locks; i++ {
		if res := m.Apply(2+i, Entry{Cmd: &Request{Session: sid, Namespace: "n", RequestID: 1 + i, Names: []string{itoa(i)}}}).Result; res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	m.Apply(locks+2, Entry{Cmd: &Freeze{Slots: []uint16{Slot("n")}, Epoch: 1, To: 1}})
	x, err := m.Export([]uint16{Slot("n")}, 1)
	if err != nil {
		t.Fatal(err)
	}
	// 1 session + locks requests + 1 namespace + locks held: 2 full chunks
	// and the rest.
	if total := 2 + 2*locks; len(x.Chunks) != (total+ChunkObjects-1)/ChunkObjects {
		t.Fatalf("%d objects in %d chunks", total, len(x.Chunks))
	}
	sg := newStage(x.Slots, 1)
	for _, ch := range x.Chunks {
		if len(ch) > ChunkBytes {
			t.Fatalf("a chunk of %d bytes", len(ch))
		}
		if err := sg.add(ch); err != nil {
			t.Fatal(err)
		}
	}
	if sg.nHeld != locks || len(sg.sessions) != 1 {
		t.Fatalf("staged %d held of %d sessions", sg.nHeld, len(sg.sessions))
	}
}

// Export reads under the read lock only: a snapshot being encoded (which
// holds snapMu) does not stop it, nor does it stop the snapshot.
func TestExportBesideASnapshot(t *testing.T) {
	m := New()
	sid := m.Apply(1, Entry{Cmd: &OpenSession{Namespace: "n", TTL: 1e9}}).Result.Session
	m.Apply(2, Entry{Cmd: &Request{Session: sid, Namespace: "n", RequestID: 1, Names: []string{"a"}}})
	m.Apply(3, Entry{Cmd: &Freeze{Slots: []uint16{Slot("n")}, Epoch: 1, To: 1}})
	sn := m.BeginSnapshot()
	done := make(chan error, 1)
	go func() {
		_, err := m.Export([]uint16{Slot("n")}, 1)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Export waits for the snapshot")
	}
	if _, err := sn.Encode(); err != nil {
		t.Fatal(err)
	}
	if m.TryBeginSnapshot() == nil {
		t.Fatal("Export left the snapshot lock held")
	}
}

// FuzzImportChunk: the chunk decoder never panics on any bytes; a chunk
// it refuses leaves the stage as it was; what it stages passes or fails
// Import's check without panicking.
func FuzzImportChunk(f *testing.F) {
	_, _, x, _, _ := movingMachines(f)
	for _, c := range x.Chunks {
		f.Add(c)
	}
	f.Add([]byte{tagNamespace, 1, 'b'})
	f.Add([]byte{tagWaiter, 1, 'x', 1, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		sg := newStage(x.Slots, x.Epoch)
		if err := sg.add(x.Chunks[0]); err != nil {
			t.Fatal(err)
		}
		before := len(sg.sessions)
		if err := sg.add(data); err != nil {
			if len(sg.chunks) != 1 || len(sg.sessions) != before {
				t.Fatal("a refused chunk changed the stage")
			}
			return
		}
		_ = sg.check(New().st, 1<<40, 1<<40)
	})
}

// SetLimits leaves the outcomes of a frozen slot's sessions as they are
// (a second export equals the first); Unfreeze, and on the target
// Import, trim them to the limit then in force.
func TestFrozenSessionsKeepTheirOutcomes(t *testing.T) {
	for _, abort := range []bool{false, true} {
		a, b := New(), NewGroup(1)
		sid := a.Apply(1, Entry{Cmd: &OpenSession{Namespace: "n", TTL: 1e9}}).Result.Session
		for i := uint64(1); i <= 3; i++ {
			a.Apply(2*i, Entry{Cmd: &Request{Session: sid, Namespace: "n", RequestID: i, Names: []string{"a"}}})
			a.Apply(2*i+1, Entry{Cmd: &Release{Session: sid, Namespace: "n", RequestID: i}})
		}
		slots := []uint16{Slot("n")}
		a.Apply(10, Entry{Cmd: &Freeze{Slots: slots, Epoch: 1, To: 1}})
		x1, _ := a.Export(slots, 1)
		l := a.Limits()
		l.maxFinished = 1
		a.Apply(11, Entry{Cmd: &SetLimits{Limits: l}})
		b.Apply(1, Entry{Cmd: &SetLimits{Limits: l}})
		x2, _ := a.Export(slots, 1)
		if x1.SHA256 != x2.SHA256 || len(a.st.sessions[sid].finished) != 3 {
			t.Fatal("SetLimits changed a frozen slot")
		}
		m := a
		if abort {
			b.Apply(2, Entry{Cmd: &SetGroup{Group: 1}})
			b.Apply(3, Entry{Cmd: &Reject{Slots: slots, Epoch: 1}})
			a.Apply(12, Entry{Cmd: &Unfreeze{Slots: slots, Epoch: 1}})
		} else {
			m = b
			b.Apply(2, Entry{Cmd: &SetGroup{Group: 1}})
			b.Apply(3, Entry{Cmd: x2.ImportChunks()[0]})
			if res := b.Apply(4, Entry{Cmd: x2.Import()}).Result; res.Err != nil {
				t.Fatal(res.Err)
			}
		}
		if s := m.st.sessions[sid]; len(s.finished) != 1 || s.floor != 3 {
			t.Fatalf("abort %v: %d outcomes, floor %d", abort, len(s.finished), s.floor)
		}
		if err := checkState(m.st); err != nil {
			t.Fatal(err)
		}
	}
}

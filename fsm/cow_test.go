package fsm

import (
	"bytes"
	"sync"
	"testing"

	"pgregory.net/rapid"
)

// TestSnapshotCOW takes a snapshot at a random point of a random history,
// then encodes it one object at a time while random entries (every kind the
// property test draws) are applied between every two objects. The bytes
// must equal those of a snapshot taken at the point with nothing applied
// meanwhile: a change that escaped copy-on-write shows as a difference. The
// harness keeps checking the machine against the model and its twin during
// and after, so a copy that leaked into the live state shows too.
func TestSnapshotCOW(t *testing.T) {
	rapidDefaults(2000, 60)
	rapid.Check(t, func(t *rapid.T) {
		h := newPropHarness()
		for n := rapid.IntRange(0, 60).Draw(t, "before"); n > 0; n-- {
			h.step(t)
		}
		want := h.m.Snapshot()
		sn := h.m.BeginSnapshot()
		h.snapping = true
		h.m.snapChunk = 1
		h.m.snapYield = func() {
			for n := rapid.IntRange(0, 3).Draw(t, "between"); n > 0; n-- {
				h.step(t)
			}
		}
		got, err := sn.Encode()
		h.m.snapYield, h.snapping = nil, false
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("the snapshot encoded while entries were applied differs from the one taken at its point (%d vs %d bytes)", len(got), len(want))
		}
		if err := checkState(h.m.st); err != nil {
			t.Fatal(err)
		}
		if h.m.Digest() != h.twin.Digest() {
			t.Fatalf("the machine that was snapshotted differs from its twin")
		}
		m2 := New()
		if err := m2.Restore(bytes.NewReader(got)); err != nil {
			t.Fatal(err)
		}
		for n := rapid.IntRange(0, 10).Draw(t, "after"); n > 0; n-- {
			h.step(t)
		}
	})
}

// TestSnapshotConcurrent encodes on one goroutine while another applies
// entries and a third queries, as raft's snapshot goroutine does: for the
// race detector, and the bytes must equal a twin's stopped at the point.
func TestSnapshotConcurrent(t *testing.T) {
	m, twin := New(), New()
	var idx uint64
	apply := func(ms []*Machine, e Entry) {
		idx++
		for _, x := range ms {
			x.Apply(idx, e)
		}
	}
	var sids []uint64
	for i := 0; i < 20; i++ {
		apply([]*Machine{m, twin}, Entry{Time: int64(idx), Cmd: &OpenSession{Namespace: "ns", TTL: 10e9}})
		sids = append(sids, idx)
	}
	for i := 0; i < 2000; i++ {
		sid := sids[i%len(sids)]
		apply([]*Machine{m, twin}, Entry{Time: int64(idx), Cmd: &Request{Session: sid, Namespace: "ns", RequestID: uint64(i + 1), Names: []string{"k" + itoa(uint64(i%300))}}})
	}
	m.snapChunk = 7
	sn := m.BeginSnapshot()
	var got []byte
	var err error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		got, err = sn.Encode()
	}()
	stop := make(chan struct{})
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				m.Query("ns")
			}
		}
	}()
	for i := 0; i < 2000; i++ {
		sid := sids[i%len(sids)]
		switch i % 3 {
		case 0:
			apply([]*Machine{m}, Entry{Time: int64(idx), Cmd: &Release{Session: sid, Namespace: "ns", RequestID: uint64(i + 1)}})
		case 1:
			apply([]*Machine{m}, Entry{Time: int64(idx), Cmd: &Abort{Session: sid, Namespace: "ns", RequestID: uint64(i + 1)}})
		default:
			apply([]*Machine{m}, Entry{Time: int64(idx), Cmd: &ExpireSession{Session: sid}})
		}
	}
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, twin.Snapshot()) {
		t.Fatal("the snapshot encoded concurrently differs from the twin's at the same point")
	}
	if err := checkState(m.st); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotCOWLimits lowers the outcomes a session remembers while a
// snapshot encodes: SetLimits trims every session, a path the random test
// reaches rarely.
func TestSnapshotCOWLimits(t *testing.T) {
	m := New()
	var idx uint64
	apply := func(c Command) Applied {
		idx++
		return m.Apply(idx, Entry{Time: int64(idx), Cmd: c})
	}
	var sids []uint64
	for range 3 {
		sids = append(sids, apply(&OpenSession{Namespace: "ns", TTL: 10e9}).Result.Session)
	}
	for _, sid := range sids {
		for id := uint64(1); id <= 5; id++ {
			apply(&Request{Session: sid, Namespace: "ns", RequestID: id, Names: []string{"x" + itoa(sid)}})
			apply(&Release{Session: sid, Namespace: "ns", RequestID: id})
		}
	}
	want := m.Snapshot()
	m.snapChunk = 1
	first := true
	m.snapYield = func() {
		if first {
			first = false
			l := m.Limits()
			l.maxFinished = 1
			apply(&SetLimits{Limits: l})
		}
	}
	got, err := m.BeginSnapshot().Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("a trim during the snapshot changed what it encoded")
	}
	if err := checkState(m.st); err != nil {
		t.Fatal(err)
	}
}

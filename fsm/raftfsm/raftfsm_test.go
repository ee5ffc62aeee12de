package raftfsm

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/lockcluster/lockcluster/fsm"
)

func entry(t *testing.T, c fsm.Command) []byte {
	t.Helper()
	b, err := fsm.EncodeEntry(fsm.Entry{Time: 7, Cmd: c})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type memSink struct {
	bytes.Buffer
	cancelled, closed bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Close() error  { s.closed = true; return nil }

func TestApplyBatchSinkAndSnapshot(t *testing.T) {
	var seen []uint64
	a := New(fsm.New(), WithSink(func(i uint64, time int64, ap fsm.Applied) {
		if time != 7 {
			t.Errorf("entry %d: sink got time %d, want the entry's 7", i, time)
		}
		seen = append(seen, i)
	}))
	logs := []*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: entry(t, &fsm.OpenSession{Namespace: "default", TTL: 10e9})},
		{Index: 2, Type: raft.LogConfiguration},
		{Index: 3, Type: raft.LogCommand, Data: entry(t, &fsm.Request{Session: 1, Namespace: "default", RequestID: 1, Names: []string{"a"}})},
	}
	out := a.ApplyBatch(logs)
	if len(out) != 3 || out[1] != nil {
		t.Fatalf("responses %v", out)
	}
	ap := out[2].(fsm.Applied)
	if ap.Result.Status != fsm.StatusGranted || ap.Result.Token != 3 || len(ap.Events) != 1 {
		t.Fatalf("request: %+v", ap)
	}
	if len(seen) != 2 || seen[0] != 1 || seen[1] != 3 {
		t.Fatalf("sink saw %v", seen)
	}

	snap, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// An entry applied between Snapshot and Persist (raft applies on while
	// its snapshot goroutine persists) is not in the snapshot.
	twin := New(fsm.New())
	twin.ApplyBatch(logs)
	a.Apply(&raft.Log{Index: 4, Type: raft.LogCommand, Data: entry(t, &fsm.Release{Session: 1, Namespace: "default", RequestID: 1})})
	var sink memSink
	if err := snap.Persist(&sink); err != nil || !sink.closed {
		t.Fatalf("persist: %v closed=%v", err, sink.closed)
	}
	snap.Release()
	var restored []uint64
	b := New(fsm.New(), WithRestored(func(i uint64) { restored = append(restored, i) }))
	if err := b.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if twin.m.Digest() != b.m.Digest() || b.m.LastIndex() != 3 {
		t.Fatalf("restored state is not the state at the snapshot's point (last index %d)", b.m.LastIndex())
	}
	if len(restored) != 1 || restored[0] != 3 {
		t.Fatalf("the restore hook saw %v, want [3]: the snapshot's index", restored)
	}
	// A snapshot raft releases without persisting lets the next one begin.
	snap, _ = a.Snapshot()
	snap.Release()
	snap, _ = a.Snapshot()
	snap.Release()
}

func TestCorruptEntryStopsTheNode(t *testing.T) {
	var got error
	a := New(fsm.New(), withFatal(func(i uint64, err error) { got = err }))
	a.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: []byte{1, 99, 0, 0}})
	if got == nil || !strings.Contains(got.Error(), "unknown") {
		t.Fatalf("fatal got %v", got)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "raft entry 2 cannot be applied") {
			t.Fatalf("default fatal: recovered %v", r)
		}
	}()
	New(fsm.New()).Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: []byte("garbage")})
}

// A SetGroup of another group (a data directory opened as the wrong
// group) and an index at or past 2^48 stop the node like a corrupt entry.
func TestWrongGroupStopsTheNode(t *testing.T) {
	var got error
	a := New(fsm.NewGroup(2), withFatal(func(i uint64, err error) { got = err }))
	b, err := fsm.EncodeEntry(fsm.Entry{Cmd: &fsm.SetGroup{Group: 3}})
	if err != nil {
		t.Fatal(err)
	}
	a.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: b})
	if got == nil || !strings.Contains(got.Error(), "another group") || a.m.LastIndex() != 0 {
		t.Fatalf("fatal got %v", got)
	}
	got = nil
	b, _ = fsm.EncodeEntry(fsm.Entry{Cmd: &fsm.SetGroup{Group: 2}})
	a.Apply(&raft.Log{Index: fsm.MaxRawIndex, Type: raft.LogCommand, Data: b})
	if got == nil {
		t.Fatal("an index past 2^48 did not stop the node")
	}
	got = nil
	a.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: b})
	if got != nil || a.m.LastIndex() != 1 {
		t.Fatalf("its own SetGroup: %v, last index %d", got, a.m.LastIndex())
	}
}

func TestRestoreErrorKeepsState(t *testing.T) {
	a := New(fsm.New(), WithRestored(func(i uint64) { t.Errorf("the restore hook ran (index %d) for a failed restore", i) }))
	a.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: entry(t, &fsm.OpenSession{Namespace: "default", TTL: 10e9})})
	before := a.m.Digest()
	if err := a.Restore(io.NopCloser(strings.NewReader("not a snapshot"))); err == nil {
		t.Fatal("restore of garbage succeeded")
	}
	if a.m.Digest() != before {
		t.Fatal("failed restore changed the state")
	}
}

// While another snapshot is being encoded (a backup), raft's Snapshot fails
// at once instead of holding raft's FSM goroutine until it ends.
func TestSnapshotWhileAnotherEncodes(t *testing.T) {
	m := fsm.New()
	a := New(m)
	backup := m.BeginSnapshot()
	if _, err := a.Snapshot(); !errors.Is(err, ErrSnapshotBusy) {
		t.Fatalf("snapshot during another: %v, want ErrSnapshotBusy", err)
	}
	if _, err := backup.Encode(); err != nil {
		t.Fatal(err)
	}
	snap, err := a.Snapshot()
	if err != nil {
		t.Fatalf("snapshot after the other ended: %v", err)
	}
	snap.Release()
}

// A batch holding an entry that cannot be applied stops the node before
// any of the batch is applied: no replica applies part of it.
func TestApplyBatchWithABadEntryAppliesNone(t *testing.T) {
	var fatal []uint64
	m := fsm.New()
	a := New(m, withFatal(func(i uint64, err error) { fatal = append(fatal, i) }))
	out := a.ApplyBatch([]*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: entry(t, &fsm.OpenSession{Namespace: "default", TTL: 10e9})},
		{Index: 2, Type: raft.LogCommand, Data: []byte{99, 1, 0}},
		{Index: 3, Type: raft.LogCommand, Data: entry(t, &fsm.OpenSession{Namespace: "default", TTL: 10e9})},
	})
	if len(fatal) != 1 || fatal[0] != 2 || m.LastIndex() != 0 || out[0] != nil || out[2] != nil {
		t.Fatalf("fatal at %v, last index %d, responses %v: want a stop at 2 with nothing applied", fatal, m.LastIndex(), out)
	}
}

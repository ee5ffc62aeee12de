package fsm

import (
	"bytes"
	"strings"
	"testing"
)

// A node's machine (KeepChangesWhenWatched) builds no change before the
// cluster's StartChanges, and every change after it; the index survives a
// snapshot, which is in format 4 once it is set and in the release
// before's format while it is not.
func TestStartChanges(t *testing.T) {
	m := New()
	m.KeepChangesWhenWatched()
	idx := uint64(0)
	apply := func(cmd Command) Applied {
		t.Helper()
		idx++
		b, err := EncodeEntry(Entry{Time: 1000, Cmd: cmd})
		if err != nil {
			t.Fatal(err)
		}
		ap, err := m.ApplyBytes(idx, b)
		if err != nil {
			t.Fatal(err)
		}
		return ap
	}
	s := apply(&OpenSession{Namespace: "default", TTL: 10e9}).Result.Session
	if ap := apply(&Request{Session: s, Namespace: "default", RequestID: 1, Names: []string{"a"}}); ap.Kept || ap.Changes != nil {
		t.Fatalf("a grant before StartChanges built changes: %+v", ap)
	}
	if _, v, _ := SnapshotHeader(m.Snapshot()); v != 2 {
		t.Fatalf("a state that builds no changes is written in format %d, want 2 (the release before's)", v)
	}
	if ap := apply(&StartChanges{}); ap.Result.Err != nil || ap.Kept || m.ChangesFrom() != 3 {
		t.Fatalf("StartChanges at 3: %+v, ChangesFrom %d", ap, m.ChangesFrom())
	}
	if ap := apply(&Release{Session: s, Namespace: "default", RequestID: 1}); !ap.Kept || len(ap.Changes) != 1 {
		t.Fatalf("a release after StartChanges: %+v, want one change", ap)
	}
	apply(&StartChanges{})
	if m.ChangesFrom() != 3 {
		t.Fatalf("a second StartChanges moved the index to %d", m.ChangesFrom())
	}
	snap := m.Snapshot()
	if _, v, _ := SnapshotHeader(snap); v != 4 {
		t.Fatalf("a state that builds changes is written in format %d, want 4", v)
	}
	if got := m.UsedLevel(); got != LevelRecords {
		t.Fatalf("UsedLevel %d, want LevelRecords", got)
	}
	r := New()
	if err := r.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if r.ChangesFrom() != 3 || r.Digest() != m.Digest() {
		t.Fatalf("restored: ChangesFrom %d, digest equal %v", r.ChangesFrom(), r.Digest() == m.Digest())
	}
	// The index is the last field before the CRC: 0 or past the last
	// index is refused.
	for _, bad := range []byte{0, 9} {
		b := append([]byte(nil), snap...)
		b[len(b)-5] = bad
		if err := New().Restore(bytes.NewReader(withCRC(b))); err == nil || !strings.Contains(err.Error(), "changes are built from index") {
			t.Fatalf("index %d: %v", bad, err)
		}
	}
}

// StartChanges is always flagged ignore-if-unknown: a node of an earlier
// build (which builds every change anyway) skips it.
func TestStartChangesIsIgnorable(t *testing.T) {
	b, err := EncodeEntry(Entry{Time: 1, Cmd: &StartChanges{}})
	if err != nil {
		t.Fatal(err)
	}
	if b[2]&flagIgnore == 0 {
		t.Fatalf("flags %#x", b[2])
	}
	unflagged := append([]byte(nil), b...)
	unflagged[2] = 0
	if _, err := DecodeEntry(unflagged); err == nil || !strings.Contains(err.Error(), "not flagged ignore-if-unknown") {
		t.Fatalf("an unflagged StartChanges decoded: %v", err)
	}
	b[1] = 200 // a type this build does not know
	e, err := DecodeEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Cmd.(*unknownEntry); !ok {
		t.Fatalf("decoded as %T", e.Cmd)
	}
}

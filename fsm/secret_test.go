package fsm

import (
	"bytes"
	"os"
	"testing"
)

func openWithSecret(t *testing.T, m *Machine, index uint64, ns, secret string) {
	t.Helper()
	ap := m.Apply(index, Entry{Cmd: &OpenSession{Namespace: ns, TTL: 10e9, SecretHash: HashSecret([]byte(secret))}})
	if ap.Result.Err != nil {
		t.Fatal(ap.Result.Err)
	}
}

// Only the opening client's secret acts for a session. Every refusal reads
// the same, whether the session is open, ended, in another namespace or
// unknown; the right secret of an ended session learns that it ended.
func TestCheckSession(t *testing.T) {
	m := New()
	openWithSecret(t, m, 1, "n", "s1")
	openWithSecret(t, m, 2, "n", "s2")
	m.Apply(3, Entry{Cmd: &CloseSession{Session: 2, Namespace: "n"}})

	if err := m.CheckSession(1, "n", []byte("s1")); err != nil {
		t.Fatalf("the owner's secret: %v", err)
	}
	if err := m.CheckSession(2, "n", []byte("s2")); err == nil || err.Code != CodeSessionClosed {
		t.Fatalf("the owner's secret of an ended session: %v, want CodeSessionClosed", err)
	}
	for name, c := range map[string]struct {
		id     uint64
		ns     string
		secret string
	}{
		"wrong secret":            {1, "n", "s2"},
		"no secret":               {1, "n", ""},
		"another namespace":       {1, "other", "s1"},
		"ended, wrong secret":     {2, "n", "s1"},
		"never opened":            {99, "n", "s1"},
		"never opened, no secret": {99, "n", ""},
	} {
		err := m.CheckSession(c.id, c.ns, []byte(c.secret))
		if err == nil || err.Code != CodePermission || err.Msg != secretRefused {
			t.Errorf("%s: %v, want CodePermission with the one refusal message", name, err)
		}
	}
	if !m.SessionKnown(1) || !m.SessionKnown(2) || m.SessionKnown(99) {
		t.Error("SessionKnown: want 1 (open) and 2 (ended) known, 99 not")
	}
}

// The tombstones of ended sessions survive a snapshot, in order, and are
// bounded.
func TestTombstonesSnapshotAndBound(t *testing.T) {
	m := New()
	idx := uint64(1)
	for i := range maxTombstones + 3 {
		openWithSecret(t, m, idx, "n", "s")
		m.Apply(idx+1, Entry{Cmd: &CloseSession{Session: idx, Namespace: "n"}})
		idx += 2
		_ = i
	}
	if n := len(m.st.closed.order); n != maxTombstones {
		t.Fatalf("%d tombstones, want the bound %d", n, maxTombstones)
	}
	if m.SessionKnown(1) {
		t.Error("the oldest tombstone was not dropped")
	}
	twin := New()
	if err := twin.Restore(bytes.NewReader(m.Snapshot())); err != nil {
		t.Fatal(err)
	}
	if err := sameMachines(m, twin); err != nil {
		t.Fatal(err)
	}
	// and they go on alike
	openWithSecret(t, m, idx, "n", "s")
	openWithSecret(t, twin, idx, "n", "s")
	m.Apply(idx+1, Entry{Cmd: &CloseSession{Session: idx, Namespace: "n"}})
	twin.Apply(idx+1, Entry{Cmd: &CloseSession{Session: idx, Namespace: "n"}})
	if m.Digest() != twin.Digest() {
		t.Fatal("a restored machine diverged after one more tombstone")
	}
}

// A snapshot and an OpenSession entry written by the version before
// secrets (testdata/compat, made with that version's code) still decode:
// their sessions accept any secret, and new sessions need theirs.
func TestVersion1SnapshotAndEntry(t *testing.T) {
	snap, err := os.ReadFile("testdata/compat/v1-snapshot.bin")
	if err != nil {
		t.Fatal(err)
	}
	m := New()
	if err := m.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatalf("restore a version 1 snapshot: %v", err)
	}
	if err := m.CheckSession(1, "n1", nil); err != nil {
		t.Errorf("a session from before secrets refused a caller without one: %v", err)
	}
	if q := m.Query("n1"); len(q.Held) == 0 {
		t.Error("the version 1 snapshot restored no held locks")
	}
	raw, err := os.ReadFile("testdata/compat/v1-opensession.bin")
	if err != nil {
		t.Fatal(err)
	}
	e, err := DecodeEntry(raw)
	if err != nil {
		t.Fatalf("decode a version 1 entry: %v", err)
	}
	if o := e.Cmd.(*OpenSession); o.Label != "old" || o.SecretHash != "" {
		t.Errorf("decoded %+v", o)
	}
	ap := m.Apply(m.LastIndex()+1, e)
	if ap.Result.Err != nil {
		t.Fatal(ap.Result.Err)
	}
	if err := m.CheckSession(ap.Result.Session, "n1", []byte("anything")); err != nil {
		t.Errorf("a session opened by a version 1 entry: %v", err)
	}

	// A new entry round-trips its secret hash.
	b, _ := EncodeEntry(Entry{Cmd: &OpenSession{Namespace: "n", SecretHash: HashSecret([]byte("x"))}})
	e, err = DecodeEntry(b)
	if err != nil || e.Cmd.(*OpenSession).SecretHash != HashSecret([]byte("x")) {
		t.Fatalf("round trip: %v %+v", err, e.Cmd)
	}
}

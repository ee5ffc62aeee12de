package fsm

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

var (
	secretA = strings.Repeat("a", 32)
	secretB = strings.Repeat("b", 32)
)

// The first cluster secret applied wins; a malformed one is refused and
// changes nothing.
func TestClusterSecretFirstWins(t *testing.T) {
	m := New()
	if m.ClusterSecret() != "" {
		t.Fatal("a new machine has a cluster secret")
	}
	for i, c := range []struct {
		secret, want string
		err          bool
	}{
		{"", "", true},
		{"short", "", true},
		{strings.Repeat("x", maxClusterSecret+1), "", true},
		{secretA, secretA, false},
		{secretB, secretA, false}, // a later one changes nothing
		{secretA, secretA, false}, // proposed again for a member that lacks it
	} {
		ap := m.Apply(uint64(i+1), Entry{Cmd: &SetClusterSecret{Secret: c.secret}})
		if (ap.Result.Err != nil) != c.err || len(ap.Events) != 0 {
			t.Fatalf("%d: SetClusterSecret(%d bytes) = %+v, want error %v", i, len(c.secret), ap, c.err)
		}
		if got := m.ClusterSecret(); got != c.want {
			t.Fatalf("%d: secret %q, want %q", i, got, c.want)
		}
	}
}

// Its entries round-trip and are always flagged ignore-if-unknown, so that
// a node of the version before applies them as no-ops.
func TestClusterSecretEntry(t *testing.T) {
	b, err := EncodeEntry(Entry{Time: 7, Cmd: &SetClusterSecret{Secret: secretA}})
	if err != nil {
		t.Fatal(err)
	}
	if b[1] != byte(typeClusterSecret) || b[2] != flagIgnore {
		t.Fatalf("header % x: want type %d flagged ignore-if-unknown", b[:3], typeClusterSecret)
	}
	e, err := DecodeEntry(b)
	if want := (Entry{Time: 7, ignoreIfUnknown: true, Cmd: &SetClusterSecret{Secret: secretA}}); err != nil || !reflect.DeepEqual(e, want) {
		t.Fatalf("DecodeEntry = %+v, %v; want %+v", e, err, want)
	}
	// What a node that does not know the type makes of it.
	old := slices.Clone(b)
	old[1] = 200
	if e, err := DecodeEntry(old); err != nil || e.Cmd.Type() != 200 {
		t.Fatalf("an unknown flagged type: %+v, %v", e, err)
	}
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if s := fmt.Sprintf(f, Entry{Cmd: &SetClusterSecret{Secret: secretA}}); strings.Contains(s, secretA) {
			t.Errorf("%s prints the secret: %s", f, s)
		}
	}
	if a, err := AdmissionOf(&SetClusterSecret{}); err != nil || a.Class != NodeOnly || a.Reason == "" {
		t.Fatalf("admission %+v, %v: want NodeOnly with a reason", a, err)
	}
}

// Raft's snapshots carry the secret (version 3); a state without one, and
// a backup, are version 2, which restores without a secret.
func TestClusterSecretSnapshot(t *testing.T) {
	m, idx := richMachine(t, false)
	plain := m.Snapshot()
	if _, v, err := SnapshotHeader(plain); err != nil || v != 2 {
		t.Fatalf("without a secret: version %d, %v; want 2", v, err)
	}
	if ap := m.Apply(idx, Entry{Cmd: &SetClusterSecret{Secret: secretA}}); ap.Result.Err != nil {
		t.Fatal(ap.Result.Err)
	}
	full := m.Snapshot()
	if _, v, err := SnapshotHeader(full); err != nil || v != 3 {
		t.Fatalf("with a secret: version %d, %v; want 3", v, err)
	}
	r := New()
	if err := r.Restore(bytes.NewReader(full)); err != nil {
		t.Fatal(err)
	}
	if r.ClusterSecret() != secretA || r.Digest() != m.Digest() {
		t.Fatalf("restored secret %q, digests equal %v", r.ClusterSecret(), r.Digest() == m.Digest())
	}
	// A backup leaves the secret out, and nothing else.
	backup, err := m.BeginSnapshot().EncodeBackup()
	if err != nil {
		t.Fatal(err)
	}
	if _, v, _ := SnapshotHeader(backup); v != 2 || bytes.Contains(backup, []byte(secretA)) {
		t.Fatalf("backup: version %d, holds the secret: %v", v, bytes.Contains(backup, []byte(secretA)))
	}
	b := New()
	if err := b.Restore(bytes.NewReader(backup)); err != nil {
		t.Fatal(err)
	}
	if b.ClusterSecret() != "" || !reflect.DeepEqual(b.Query("n1"), m.Query("n1")) || b.LastIndex() != m.LastIndex() {
		t.Fatalf("the backup restored secret %q, or another state", b.ClusterSecret())
	}
	// The machine still snapshots its secret after a backup.
	if !bytes.Equal(m.Snapshot(), full) {
		t.Fatal("a backup changed the next snapshot")
	}
	// A version 3 snapshot with a malformed secret is refused.
	bad := slices.Clone(full)
	i := bytes.LastIndex(bad, []byte(secretA))
	bad = append(append(bad[:i-1:i-1], 3, 'x', 'y', 'z'), bad[i+len(secretA):]...)
	if err := New().Restore(bytes.NewReader(withCRC(bad))); err == nil || !strings.Contains(err.Error(), "cluster secret") {
		t.Fatalf("a malformed secret: Restore = %v", err)
	}
}

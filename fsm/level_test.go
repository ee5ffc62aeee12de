package fsm

import (
	"bytes"
	"maps"
	"slices"
	"testing"
)

// Every entry type this build knows has a level, within the levels it
// supports, and the table says what the release before (LevelBase,
// commit d704a4c) knew: types 1 to 8.
func TestEveryEntryTypeHasALevel(t *testing.T) {
	for typ := range typeNames {
		l, ok := entryLevels[typ]
		if !ok {
			t.Errorf("%s has no protocol level (level.go)", typ)
			continue
		}
		// The group entries are LevelGroups', above ProtocolLevel until
		// the server's side of a move exists (level.go).
		if l.level < LevelBase || (l.level > ProtocolLevel && l.level != LevelGroups) || l.feature == "" {
			t.Errorf("%s: level %d, feature %q", typ, l.level, l.feature)
		}
		if newCmd(typ) == nil {
			t.Errorf("%s is in the level table but not decoded", typ)
		}
	}
	if len(entryLevels) != len(typeNames) {
		t.Errorf("the level table has %d types, the names %d", len(entryLevels), len(typeNames))
	}
	for typ := typeOpenSession; typ <= typeSetMember; typ++ {
		if EntryLevel(typ) != LevelBase {
			t.Errorf("%s is at level %d: the release before applies it", typ, EntryLevel(typ))
		}
	}
	if EntryLevel(typeClusterSecret) != LevelClusterSecret || EntryFeature(typeClusterSecret) != "the cluster secret" {
		t.Errorf("SetClusterSecret: level %d, %q", EntryLevel(typeClusterSecret), EntryFeature(typeClusterSecret))
	}
	if EntryLevel(EntryType(200)) <= ProtocolLevel {
		t.Error("an unknown entry type is admitted at this build's level")
	}
}

// Every level up to ProtocolLevel introduced something (a level that adds
// nothing is not a level), and every snapshot format this build reads
// has a level.
func TestLevelTableIsDense(t *testing.T) {
	used := map[int]bool{}
	for _, l := range entryLevels {
		used[l.level] = true
	}
	for _, l := range snapLevels {
		used[l] = true
	}
	for l := LevelBase; l <= ProtocolLevel; l++ {
		if !used[l] {
			t.Errorf("level %d introduces nothing", l)
		}
	}
	for v := uint32(minSnapVersion); v <= snapVersion; v++ {
		// Format 5 is LevelGroups', which this build reads but is not yet
		// its level (level.go, LevelGroups): nothing a server proposes
		// makes a state that needs it.
		if l := SnapshotLevel(v); l > ProtocolLevel && (v != 5 || l != LevelGroups) {
			t.Errorf("snapshot format %d has no level", v)
		}
	}
	if got := slices.Sorted(maps.Keys(snapLevels)); !slices.Equal(got, []uint64{1, 2, 3, 4, 5}) || snapVersion != 5 {
		t.Errorf("snapshot formats %v with snapVersion %d: add the new one's level", got, snapVersion)
	}
}

// The envelope EncodeEntry writes, whatever the command, is one the
// release before decodes: an entry of a type it knows reaches it readable.
func TestEnvelopeIsReadByThePreviousLevel(t *testing.T) {
	if l, ok := envelopeLevels[envelopeVersion]; !ok || l > PreviousLevel {
		t.Fatalf("envelope version %d is at level %d (known %v): the release before cannot decode its entries", envelopeVersion, l, ok)
	}
	b, err := EncodeEntry(Entry{Cmd: &Request{Session: 1, Namespace: "n", RequestID: 1, Names: []string{"x"}}})
	if err != nil || int(b[0]) != envelopeVersion {
		t.Fatalf("envelope %v, %v", b[:1], err)
	}
}

// A snapshot is written in the oldest format that carries the state: a
// state that uses nothing above the release before (no cluster secret,
// which the gate holds back while a member runs that release) in format
// 2, which that release reads; one with the secret in format 3. A backup
// leaves the secret out, so it is format 2 too.
func TestSnapshotFormatFollowsTheLevel(t *testing.T) {
	m := New()
	m.Apply(1, Entry{Cmd: &OpenSession{Namespace: "n", TTL: 1e9}})
	version := func(b []byte, err error) uint32 {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		_, v, err := SnapshotHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := version(m.BeginSnapshot().Encode()); v != 2 || SnapshotLevel(v) > PreviousLevel || m.UsedLevel() != LevelBase {
		t.Fatalf("without the secret: format %d (level %d), used level %d", v, SnapshotLevel(v), m.UsedLevel())
	}
	m.Apply(2, Entry{Cmd: &SetClusterSecret{Secret: secretA}})
	if v := version(m.BeginSnapshot().Encode()); v != 3 || SnapshotLevel(v) != LevelClusterSecret || m.UsedLevel() != LevelClusterSecret {
		t.Fatalf("with the secret: format %d (level %d), used level %d", v, SnapshotLevel(v), m.UsedLevel())
	}
	if v := version(m.BeginSnapshot().EncodeBackup()); v != 2 {
		t.Fatalf("a backup: format %d, want 2", v)
	}
	if SnapshotLevel(99) <= ProtocolLevel {
		t.Fatal("an unknown snapshot format has a level this build supports")
	}
}

// A command needs LevelRecords for its type (SetRecord) or for a field of
// that level (a semaphore's MaxHolders, record limits other than the
// defaults); the same types without them need what they always did.
func TestCommandLevel(t *testing.T) {
	lim := DefaultLimits()
	lim.MaxRecordBytes = 100
	for _, c := range []struct {
		cmd     Command
		level   int
		feature string
	}{
		{&Request{Names: []string{"x"}}, LevelBase, "lock requests"},
		{&Request{Names: []string{"x"}, Mode: Shared, MaxHolders: 2}, LevelRecords, "semaphores"},
		{&SetLimits{Limits: DefaultLimits()}, LevelBase, "replicated limits"},
		{&SetLimits{Limits: lim}, LevelRecords, "record limits"},
		{&SetRecord{}, LevelRecords, "records"},
		{&SetClusterSecret{}, LevelClusterSecret, "the cluster secret"},
	} {
		if l, f := CommandLevel(c.cmd), CommandFeature(c.cmd); l != c.level || f != c.feature {
			t.Errorf("%T %+v: level %d %q, want %d %q", c.cmd, c.cmd, l, f, c.level, c.feature)
		}
	}
	// What the release before decodes: limits with the default record
	// limits and requests without MaxHolders encode as they always did.
	b, err := EncodeEntry(Entry{Cmd: &SetLimits{Limits: DefaultLimits()}})
	if err != nil {
		t.Fatal(err)
	}
	d := decoder{b: b[4:]}
	if n := d.uvarint(); n != baseLimitFields {
		t.Errorf("default limits encode %d fields, want %d", n, baseLimitFields)
	}
	r1, _ := EncodeEntry(Entry{Cmd: &Request{Session: 1, Namespace: "n", RequestID: 1, Names: []string{"x"}, Mode: Shared}})
	r2, _ := EncodeEntry(Entry{Cmd: &Request{Session: 1, Namespace: "n", RequestID: 1, Names: []string{"x"}, Mode: Shared, MaxHolders: 3}})
	if len(r2) != len(r1)+1 || r1[len(r1)-1] != 0 || r2[len(r1)-1] != reqMaxHolders {
		t.Errorf("requests encode as %v and, with MaxHolders, %v", r1, r2)
	}
}

// A state that holds a record, a semaphore request or record limits of its
// own is written in format 4 (LevelRecords), a backup of it too (records
// are the clients' data); without them, in the format it had before.
func TestSnapshotFormat4(t *testing.T) {
	version := func(m *Machine, backup bool) uint32 {
		t.Helper()
		sn := m.BeginSnapshot()
		enc := sn.Encode
		if backup {
			enc = sn.EncodeBackup
		}
		b, err := enc()
		if err != nil {
			t.Fatal(err)
		}
		_, v, err := SnapshotHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		m2 := New()
		if err := m2.Restore(bytes.NewReader(b)); err != nil {
			t.Fatalf("format %d: %v", v, err)
		}
		if !backup && m2.Digest() != m.Digest() {
			t.Fatalf("format %d: the digest changed in a round trip", v)
		}
		return v
	}
	m := New()
	m.Apply(1, Entry{Cmd: &OpenSession{Namespace: "n", TTL: 1e9}})
	m.Apply(2, Entry{Cmd: &SetClusterSecret{Secret: secretA}})
	m.Apply(3, Entry{Cmd: &Request{Session: 1, Namespace: "n", RequestID: 1, Names: []string{"x"}}})
	if v := version(m, false); v != 3 {
		t.Fatalf("no records: format %d", v)
	}
	m.Apply(4, Entry{Cmd: &SetRecord{Session: 1, Namespace: "n", RequestID: 1, Token: 3, Name: "x", Value: []byte("v")}})
	if v, b := version(m, false), version(m, true); v != 4 || b != 4 || m.UsedLevel() != LevelRecords {
		t.Fatalf("a record: format %d, backup %d, used level %d", v, b, m.UsedLevel())
	}
	m.Apply(5, Entry{Cmd: &SetRecord{Session: 1, Namespace: "n", RequestID: 1, Token: 3, Name: "x", Delete: true}})
	if v := version(m, false); v != 3 {
		t.Fatalf("the record deleted: format %d", v)
	}
	m.Apply(6, Entry{Cmd: &Request{Session: 1, Namespace: "n", RequestID: 2, Names: []string{"s"}, Mode: Shared, MaxHolders: 2}})
	if v := version(m, false); v != 4 {
		t.Fatalf("a semaphore: format %d", v)
	}
	m.Apply(7, Entry{Cmd: &Release{Session: 1, Namespace: "n", RequestID: 2}})
	lim := DefaultLimits()
	lim.MaxNamespaceRecordBytes = 10
	m.Apply(8, Entry{Cmd: &SetLimits{Limits: lim}})
	if v := version(m, false); v != 4 {
		t.Fatalf("record limits: format %d", v)
	}
	m.Apply(9, Entry{Cmd: &SetLimits{Limits: DefaultLimits()}})
	if v := version(m, true); v != 2 {
		t.Fatalf("a backup of nothing of LevelRecords: format %d", v)
	}
}

package fsm

import (
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
		if l.level < LevelBase || l.level > ProtocolLevel || l.feature == "" {
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
		if SnapshotLevel(v) > ProtocolLevel {
			t.Errorf("snapshot format %d has no level", v)
		}
	}
	if got := slices.Sorted(maps.Keys(snapLevels)); !slices.Equal(got, []uint64{1, 2, 3}) || snapVersion != 3 {
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

// stablecheck_test.go tests stablecheck.go on real raft.db files: each
// corruption is made by flipping a byte on disk, and a sub-test shows what
// raft-boltdb alone returns for it.

package raftnode

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

var (
	testKeyCT  = []byte("CurrentTerm")
	testKeyLVT = []byte("LastVoteTerm")
	testKeyLVC = []byte("LastVoteCand")
)

// openTestBolt opens dir/raft.db as openStores does.
func openTestBolt(t testing.TB, dir string) *raftboltdb.BoltStore {
	t.Helper()
	b, err := raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(dir, "raft.db"),
		BoltOptions: &bbolt.Options{Timeout: boltOpenTimeout, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// openChecked opens dir's stable store as a node should: the meta pages
// are checked before bbolt opens the file, the shadow after. The bolt
// store is closed when the test ends unless closed before.
func openChecked(t testing.TB, dir string) (*checkedStable, *raftboltdb.BoltStore, *storageDamage) {
	t.Helper()
	meta, err := checkBoltMeta(filepath.Join(dir, "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	b := openTestBolt(t, dir)
	t.Cleanup(func() { b.Close() })
	cs, d, err := newCheckedStable(b, dir, meta, testLogger(t, "stable"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.close() })
	return cs, b, d
}

// writeTestVote writes a term and a vote as raft does (raft.go setCurrentTerm,
// persistVote).
func writeTestVote(t testing.TB, s raft.StableStore, term uint64, cand string) {
	t.Helper()
	if err := s.SetUint64(testKeyCT, term); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64(testKeyLVT, term); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(testKeyLVC, []byte(cand)); err != nil {
		t.Fatal(err)
	}
}

// readTestVote reads the three keys as raft does.
func readTestVote(t testing.TB, s raft.StableStore) (term, voteTerm uint64, cand string) {
	t.Helper()
	var err error
	if term, err = s.GetUint64(testKeyCT); err != nil {
		t.Fatalf("CurrentTerm: %v", err)
	}
	if voteTerm, err = s.GetUint64(testKeyLVT); err != nil {
		t.Fatalf("LastVoteTerm: %v", err)
	}
	b, err := s.Get(testKeyLVC)
	if err != nil {
		t.Fatalf("LastVoteCand: %v", err)
	}
	return term, voteTerm, string(b)
}

// wantTestVote fails the test unless s holds that term and vote.
func wantTestVote(t testing.TB, s raft.StableStore, term, voteTerm uint64, cand string) {
	t.Helper()
	gt, gv, gc := readTestVote(t, s)
	if gt != term || gv != voteTerm || gc != cand {
		t.Fatalf("term %d, vote (%d, %q); want term %d, vote (%d, %q)", gt, gv, gc, term, voteTerm, cand)
	}
}

// wantStableDamage fails the test unless d reports a damaged stable store.
func wantStableDamage(t testing.TB, d *storageDamage, what string) {
	t.Helper()
	if d == nil {
		t.Fatalf("%s: no damage reported", what)
	}
	if d.Store != "stable" || d.Index != 0 || d.Path == "" || d.Reason == "" {
		t.Fatalf("%s: damage %+v", what, d)
	}
	if !errors.Is(d, ErrDamaged) {
		t.Fatal("not ErrDamaged")
	}
	t.Logf("%s: %v", what, d)
}

// flipByteAt xors one byte of a file.
func flipByteAt(t testing.TB, path string, off int64, mask byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := []byte{0}
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= mask
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// newestBoltMeta returns the file offset of the meta page with the higher
// txid, and the page size (stablecheck.go names the layout's source).
func newestBoltMeta(t testing.TB, path string) (off int64, pageSize int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m0 := parseBoltMeta(b)
	if !m0.valid {
		t.Fatal("meta page 0 is invalid before the test damaged it")
	}
	pageSize = int64(m0.pageSize)
	m1 := parseBoltMeta(b[pageSize:])
	if !m1.valid {
		t.Fatal("meta page 1 is invalid before the test damaged it")
	}
	if m1.txid > m0.txid {
		return pageSize, pageSize
	}
	return 0, pageSize
}

// A flipped byte in the newest bbolt meta page makes bbolt go back to the
// previous transaction: the last write of the vote is lost, the term kept.
// checkBoltMeta reports it before bbolt opens the file, and the checked
// store keeps serving the shadow's vote, reports the damage, and keeps
// reporting it at every open until pinVote.
func TestStableBoltMetaRollbackIsDamage(t *testing.T) {
	for _, field := range []struct {
		name string
		off  int64 // in the meta, after the page header
	}{
		{"root", 16}, {"txid", boltMetaTxid}, {"checksum", boltMetaSumLen + 3}, {"magic", 0},
	} {
		t.Run(field.name, func(t *testing.T) {
			dir := t.TempDir()
			cs, b, d := openChecked(t, dir)
			if d != nil {
				t.Fatal(d)
			}
			writeTestVote(t, cs, 6, "cand-old")
			writeTestVote(t, cs, 7, "cand-a") // the last transaction: LastVoteCand = cand-a
			b.Close()
			path := filepath.Join(dir, "raft.db")
			off, _ := newestBoltMeta(t, path)
			flipByteAt(t, path, off+boltPageHeaderSize+field.off, 0x04)

			t.Run("raft-boltdb-alone", func(t *testing.T) {
				// Copy: opening commits a transaction that overwrites the bad page.
				cp := t.TempDir()
				raw, _ := os.ReadFile(path)
				if err := os.WriteFile(filepath.Join(cp, "raft.db"), raw, 0o600); err != nil {
					t.Fatal(err)
				}
				b := openTestBolt(t, cp)
				defer b.Close()
				// The vote of term 7 went back to term 6's candidate, without
				// an error: raft would grant cand-old a vote in term 7 too.
				wantTestVote(t, b, 7, 7, "cand-old")
			})

			cs, b, d = openChecked(t, dir)
			wantStableDamage(t, d, "meta page flipped")
			wantTestVote(t, cs, 7, 7, "cand-a")
			b.Close()
			// bbolt's open overwrote the bad page; the shadow remembers.
			if d, err := checkBoltMeta(path); d != nil || err != nil {
				t.Fatalf("meta pages after reopening: %v %v", d, err)
			}
			cs, b, d = openChecked(t, dir)
			wantStableDamage(t, d, "reopened")
			wantTestVote(t, cs, 7, 7, "cand-a")
			b.Close()
			reason := d.Reason
			_, b, d = openChecked(t, dir)
			wantStableDamage(t, d, "reopened again")
			if d.Reason != reason {
				t.Fatalf("the reason changed from %q to %q", reason, d.Reason)
			}
			b.Close()
		})
	}
}

// checkBoltMeta ignores a missing or empty file and finds two valid meta
// pages valid; a flip in the older page (no write lost) is reported too.
func TestCheckBoltMeta(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "raft.db")
	if d, err := checkBoltMeta(path); d != nil || err != nil {
		t.Fatalf("no file: %v %v", d, err)
	}
	b := openTestBolt(t, dir)
	writeTestVote(t, b, 3, "x")
	b.Close()
	if d, err := checkBoltMeta(path); d != nil || err != nil {
		t.Fatalf("valid file: %v %v", d, err)
	}
	newest, pageSize := newestBoltMeta(t, path)
	older := pageSize - newest
	flipByteAt(t, path, older+boltPageHeaderSize+boltMetaSumLen, 1)
	d, err := checkBoltMeta(path)
	if err != nil {
		t.Fatal(err)
	}
	wantStableDamage(t, d, "older meta page flipped")
	flipByteAt(t, path, newest+boltPageHeaderSize+boltMetaSumLen, 1)
	d, err = checkBoltMeta(path)
	if err != nil {
		t.Fatal(err)
	}
	wantStableDamage(t, d, "both meta pages flipped")
}

// A flipped byte in the stored CurrentTerm value is read back by bbolt as a
// valid term (no checksum on data pages); the checked store reports it
// and serves the shadow's term.
func TestStableFlippedTermIsDamage(t *testing.T) {
	dir := t.TempDir()
	cs, b, _ := openChecked(t, dir)
	writeTestVote(t, cs, 7, "cand-a")
	b.Close()
	path := filepath.Join(dir, "raft.db")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A bbolt leaf holds each key followed by its value. Copy-on-write
	// leaves older copies of the page in free pages: flip them all, the
	// live one is among them (the sub-test below proves it).
	n := 0
	for i := 0; ; {
		j := bytes.Index(raw[i:], testKeyCT)
		if j < 0 {
			break
		}
		at := int64(i + j + len(testKeyCT))
		if binary.BigEndian.Uint64(raw[at:]) == 7 {
			flipByteAt(t, path, at+7, 0x10) // 7 → 23
			n++
		}
		i += j + 1
	}
	if n == 0 {
		t.Fatal("CurrentTerm = 7 not found in raft.db")
	}

	t.Run("raft-boltdb-alone", func(t *testing.T) {
		cp := t.TempDir()
		raw, _ := os.ReadFile(path)
		os.WriteFile(filepath.Join(cp, "raft.db"), raw, 0o600)
		b := openTestBolt(t, cp)
		defer b.Close()
		wantTestVote(t, b, 23, 7, "cand-a")
	})

	cs, _, d := openChecked(t, dir)
	wantStableDamage(t, d, "CurrentTerm flipped")
	wantTestVote(t, cs, 7, 7, "cand-a")
}

// shadowSlots decodes the slots of dir's shadow file and returns the
// index of the newer valid one (both must be valid).
func shadowSlots(t testing.TB, dir string) (newest int, slots [2]stableRecord) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, stableShadowFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != stableShadowSize {
		t.Fatalf("the shadow file is %d bytes", len(b))
	}
	for i := range slots {
		if slots[i], err = decodeStableSlot(b[i*stableSlotSize:(i+1)*stableSlotSize], i); err != nil {
			t.Fatalf("slot %d: %v", i, err)
		}
	}
	if slots[1].seq > slots[0].seq {
		newest = 1
	}
	return newest, slots
}

// Offsets in a slot written by writeTestVote(7, "cand-a"), one in each
// field: the magic, the seq, CurrentTerm's length and its value,
// LastVoteCand's value, the damage length, the zeros, the CRC.
var testSlotOffsets = []struct {
	name string
	off  int64
}{
	{"magic", 0}, {"seq", 15}, {"term-len", 17}, {"term", 28}, {"cand", 48}, {"damaged-len", 56},
	{"zeros", 2000}, {"crc", stableSlotSize - 1},
}

// A flipped bit in the newer slot of the shadow is damage: raft.db holds
// the newer values, which no valid slot has. The shadow file is kept as
// stable.shadow.corrupt, raft.db's values are served, and the damage is
// reported again at the next open, until pinVote.
func TestStableFlippedNewerSlotIsDamage(t *testing.T) {
	for _, f := range testSlotOffsets {
		t.Run(f.name, func(t *testing.T) {
			dir := t.TempDir()
			cs, b, _ := openChecked(t, dir)
			writeTestVote(t, cs, 7, "cand-a")
			b.Close()
			cs.close()
			newest, _ := shadowSlots(t, dir)
			shadow := filepath.Join(dir, stableShadowFile)
			flipByteAt(t, shadow, int64(newest)*stableSlotSize+f.off, 0x01)
			wantShadowDamageKept(t, dir, "newer slot flipped")
		})
	}
}

// A flipped bit in the older slot is harmless: nothing in it is served,
// and raft.db agrees with the newer one. The next change rewrites it.
func TestStableFlippedOlderSlotIsHarmless(t *testing.T) {
	for _, f := range testSlotOffsets {
		t.Run(f.name, func(t *testing.T) {
			dir := t.TempDir()
			cs, b, _ := openChecked(t, dir)
			writeTestVote(t, cs, 7, "cand-a")
			b.Close()
			cs.close()
			newest, _ := shadowSlots(t, dir)
			shadow := filepath.Join(dir, stableShadowFile)
			flipByteAt(t, shadow, int64(1-newest)*stableSlotSize+f.off, 0x01)
			cs, b, d := openChecked(t, dir)
			if d != nil {
				t.Fatalf("damage: %v", d)
			}
			wantTestVote(t, cs, 7, 7, "cand-a")
			if err := cs.SetUint64(testKeyCT, 8); err != nil {
				t.Fatal(err)
			}
			n, slots := shadowSlots(t, dir) // both valid again
			if n != 1-newest || slots[n].seq != slots[newest].seq+1 {
				t.Fatalf("slot %d written (seq %d after %d), want slot %d", n, slots[n].seq, slots[newest].seq, 1-newest)
			}
			b.Close()
			cs.close()
			cs, _, d = openChecked(t, dir)
			if d != nil {
				t.Fatalf("damage: %v", d)
			}
			wantTestVote(t, cs, 8, 7, "cand-a")
			if _, err := os.Stat(shadow + ".corrupt"); err == nil {
				t.Error("a harmless flip was kept as damage")
			}
		})
	}
}

// Both slots flipped, or a shadow file of another size, is damage;
// raft.db's values are served.
func TestStableShadowUnusableIsDamage(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil func(t *testing.T, path string)
	}{
		{"both-slots", func(t *testing.T, path string) {
			flipByteAt(t, path, 30, 0x80)
			flipByteAt(t, path, stableSlotSize+30, 0x80)
		}},
		{"truncated", func(t *testing.T, path string) {
			if err := os.Truncate(path, stableSlotSize); err != nil {
				t.Fatal(err)
			}
		}},
		{"empty", func(t *testing.T, path string) {
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		}},
		{"one-record-format", func(t *testing.T, path string) {
			// The single-record stable.shadow of unreleased commits.
			if err := os.WriteFile(path, []byte("LCSTBL01\x01\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00\x00\x07"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cs, b, _ := openChecked(t, dir)
			writeTestVote(t, cs, 7, "cand-a")
			b.Close()
			cs.close()
			shadow := filepath.Join(dir, stableShadowFile)
			c.spoil(t, shadow)
			wantShadowDamageKept(t, dir, c.name)
		})
	}
}

// A write of the newer slot torn by a crash (raft.db not written yet: the
// shadow goes first) leaves the older slot valid and equal to raft.db:
// not damage, and the older values are served.
func TestStableTornSlotWriteIsNotDamage(t *testing.T) {
	for _, tear := range []struct {
		name string
		at   int64 // bytes of the new slot written
		old  bool  // the rest is the old slot's content, else zeros
	}{
		{"first-sector", 512, true}, {"half", stableSlotSize / 2, true}, {"all-but-crc", stableSlotCRC, true},
		{"zeros-after", 100, false},
	} {
		t.Run(tear.name, func(t *testing.T) {
			dir := t.TempDir()
			meta, _ := checkBoltMeta(filepath.Join(dir, "raft.db"))
			b := openTestBolt(t, dir)
			drop := &dropStable{StableStore: b}
			cs, d, err := newCheckedStable(drop, dir, meta, testLogger(t, "stable"))
			if err != nil || d != nil {
				t.Fatal(err, d)
			}
			writeTestVote(t, cs, 7, "cand-a")
			shadow := filepath.Join(dir, stableShadowFile)
			before, _ := os.ReadFile(shadow)
			drop.drop = true
			if err := cs.SetUint64(testKeyCT, 8); err != nil { // the shadow slot only
				t.Fatal(err)
			}
			cs.close()
			b.Close()
			after, _ := os.ReadFile(shadow)
			n, _ := shadowSlots(t, dir)
			slot := after[n*stableSlotSize : (n+1)*stableSlotSize]
			rest := make([]byte, stableSlotSize)
			if tear.old {
				rest = before[n*stableSlotSize : (n+1)*stableSlotSize]
			}
			copy(slot[tear.at:], rest[tear.at:])
			if err := os.WriteFile(shadow, after, 0o600); err != nil {
				t.Fatal(err)
			}

			cs, b2, d := openChecked(t, dir)
			if d != nil {
				t.Fatalf("damage: %v", d)
			}
			wantTestVote(t, cs, 7, 7, "cand-a")
			wantTestVote(t, b2, 7, 7, "cand-a")
			// The node goes on: term 8 again, into the torn slot.
			writeTestVote(t, cs, 8, "cand-b")
			b2.Close()
			cs.close()
			cs, _, d = openChecked(t, dir)
			if d != nil {
				t.Fatalf("damage: %v", d)
			}
			wantTestVote(t, cs, 8, 8, "cand-b")
		})
	}
}

// A store keeps working on the files it has open when its directory is
// removed (nodetest's cleanup removes the data directories before the
// nodes stop): no write of the term or vote needs the directory.
func TestStableDirectoryRemoved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cs, b, _ := openChecked(t, dir)
	writeTestVote(t, cs, 7, "cand-a")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	writeTestVote(t, cs, 8, "cand-b")
	wantTestVote(t, cs, 8, 8, "cand-b")
	wantTestVote(t, b, 8, 8, "cand-b")
	if err := cs.pinVote(9, []byte("leader")); err != nil {
		t.Fatal(err)
	}
	wantTestVote(t, cs, 9, 9, "leader")
}

// dropStable drops writes of the stable keys while drop is set: the node
// "crashed" after the shadow was written, before raft.db was.
type dropStable struct {
	raft.StableStore
	drop bool
}

// Set drops a stable key while drop is set, and reports success.
func (s *dropStable) Set(k, v []byte) error {
	if s.drop && stableKeyIndex(k) >= 0 {
		return nil
	}
	return s.StableStore.Set(k, v)
}

// A crash between the shadow write and raft.db's is repaired from the
// shadow at the next open, for each of raft's writes, and is not damage.
func TestStableCrashBetweenWritesIsRepaired(t *testing.T) {
	for k := range stableKeys {
		t.Run(string(stableKeys[k]), func(t *testing.T) {
			dir := t.TempDir()
			meta, _ := checkBoltMeta(filepath.Join(dir, "raft.db"))
			b := openTestBolt(t, dir)
			drop := &dropStable{StableStore: b}
			cs, d, err := newCheckedStable(drop, dir, meta, testLogger(t, "stable"))
			if err != nil || d != nil {
				t.Fatal(err, d)
			}
			writeTestVote(t, cs, 7, "cand-a")
			// raft in term 8: setCurrentTerm, then persistVote.
			writes := []func() error{
				func() error { return cs.SetUint64(testKeyCT, 8) },
				func() error { return cs.SetUint64(testKeyLVT, 8) },
				func() error { return cs.Set(testKeyLVC, []byte("cand-b")) },
			}
			for i, w := range writes {
				drop.drop = i == k
				if err := w(); err != nil {
					t.Fatal(err)
				}
				if drop.drop {
					break // the process is gone
				}
			}
			b.Close()

			cs, b, d = openChecked(t, dir)
			if d != nil {
				t.Fatalf("damage: %v", d)
			}
			want := [][3]any{{8, 7, "cand-a"}, {8, 8, "cand-a"}, {8, 8, "cand-b"}}[k]
			wantTestVote(t, cs, uint64(want[0].(int)), uint64(want[1].(int)), want[2].(string))
			wantTestVote(t, b, uint64(want[0].(int)), uint64(want[1].(int)), want[2].(string)) // repaired
		})
	}
}

// A data directory written before shadows existed gets one, from raft.db,
// and is not damaged; a shadow lost afterwards is damage.
func TestStableUpgradeCreatesShadow(t *testing.T) {
	dir := t.TempDir()
	b := openTestBolt(t, dir)
	writeTestVote(t, b, 5, "cand-old")
	b.Close()
	cs, b, d := openChecked(t, dir)
	if d != nil {
		t.Fatalf("damage: %v", d)
	}
	wantTestVote(t, cs, 5, 5, "cand-old")
	if _, err := os.Stat(filepath.Join(dir, stableShadowFile)); err != nil {
		t.Fatal(err)
	}
	b.Close()
	cs, b, d = openChecked(t, dir)
	if d != nil {
		t.Fatalf("damage at the second open: %v", d)
	}
	wantTestVote(t, cs, 5, 5, "cand-old")
	b.Close()

	if err := os.Remove(filepath.Join(dir, stableShadowFile)); err != nil {
		t.Fatal(err)
	}
	_, _, d = openChecked(t, dir)
	wantStableDamage(t, d, "shadow removed")

	// A new data directory: nothing to check, nothing reported.
	cs, _, d = openChecked(t, t.TempDir())
	if d != nil {
		t.Fatalf("new directory: %v", d)
	}
	if _, err := cs.GetUint64(testKeyCT); err == nil || err.Error() != "not found" {
		t.Fatalf("CurrentTerm of a new store: %v, want raft's \"not found\"", err)
	}
}

// pinVote raises the term and the vote to T, clears the damage for good,
// and writes both records so that they agree; a later vote is kept.
func TestStablePinVote(t *testing.T) {
	dir := t.TempDir()
	cs, b, _ := openChecked(t, dir)
	writeTestVote(t, cs, 7, "cand-a")
	b.Close()
	cs.close()
	newest, _ := shadowSlots(t, dir)
	flipByteAt(t, filepath.Join(dir, stableShadowFile), int64(newest)*stableSlotSize+20, 1)
	cs, b, d := openChecked(t, dir)
	wantStableDamage(t, d, "newer slot flipped")
	if err := cs.SetUint64(testKeyCT, 9); err != nil { // raft follows the leader of term 9
		t.Fatal(err)
	}
	if err := cs.pinVote(9, []byte("leader")); err != nil {
		t.Fatal(err)
	}
	wantTestVote(t, cs, 9, 9, "leader")
	b.Close()
	cs, b, d = openChecked(t, dir)
	if d != nil {
		t.Fatalf("damage after pinVote: %v", d)
	}
	wantTestVote(t, cs, 9, 9, "leader")
	wantTestVote(t, b, 9, 9, "leader")

	// A vote in a later term stays; a lower term is raised.
	writeTestVote(t, cs, 12, "cand-c")
	if err := cs.pinVote(10, []byte("leader")); err != nil {
		t.Fatal(err)
	}
	wantTestVote(t, cs, 12, 12, "cand-c")
	if err := cs.SetUint64(testKeyCT, 4); err != nil { // not raft's, but pinVote must cope
		t.Fatal(err)
	}
	if err := cs.pinVote(11, []byte("leader")); err != nil {
		t.Fatal(err)
	}
	wantTestVote(t, cs, 11, 12, "cand-c")
	b.Close()
	cs, _, d = openChecked(t, dir)
	if d != nil {
		t.Fatalf("damage: %v", d)
	}
	wantTestVote(t, cs, 11, 12, "cand-c")
	if err := cs.pinVote(13, nil); err == nil {
		t.Fatal("pinVote without a leader")
	}
}

// Other keys pass through; a failed raft.db write is caught up at the
// next write so that the shadow never runs ahead by more than one write.
func TestStableOtherKeysAndFailedWrites(t *testing.T) {
	dir := t.TempDir()
	cs, b, _ := openChecked(t, dir)
	if err := cs.SetUint64([]byte("other"), 3); err != nil {
		t.Fatal(err)
	}
	if v, err := b.GetUint64([]byte("other")); err != nil || v != 3 {
		t.Fatalf("other key: %d %v", v, err)
	}
	fail := &failStable{StableStore: b}
	cs.inner = fail
	writeTestVote(t, cs, 4, "a")
	fail.fail = true
	if err := cs.SetUint64(testKeyCT, 5); err == nil {
		t.Fatal("the failed write was not reported")
	}
	fail.fail = false
	if err := cs.SetUint64(testKeyLVT, 5); err != nil {
		t.Fatal(err)
	}
	wantTestVote(t, b, 5, 5, "a")
	b.Close()
	cs, _, d := openChecked(t, dir)
	if d != nil {
		t.Fatalf("damage: %v", d)
	}
	wantTestVote(t, cs, 5, 5, "a")
}

type failStable struct {
	raft.StableStore
	fail bool
}

// Set fails every write while fail is set.
func (s *failStable) Set(k, v []byte) error {
	if s.fail {
		return errors.New("disk full")
	}
	return s.StableStore.Set(k, v)
}

// A slot survives its encoding; any one flipped bit in it, or a record in
// the other slot, fails its decoding; a damage reason too long for the
// slot is cut, values too long for it are an error.
func TestStableSlotEncoding(t *testing.T) {
	r := stableRecord{seq: 5, damaged: "why"}
	r.vals[0] = stableValue{ok: true, b: binary.BigEndian.AppendUint64(nil, 7)}
	r.vals[2] = stableValue{ok: true, b: []byte{}}
	b, err := r.encode()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != stableSlotSize {
		t.Fatalf("a slot of %d bytes", len(b))
	}
	got, err := decodeStableSlot(b, 1)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(r) {
		t.Fatalf("decoded %+v, want %+v", got, r)
	}
	if _, err := decodeStableSlot(b, 0); err == nil {
		t.Fatal("seq 5 decoded in slot 0")
	}
	for i := range len(b) * 8 {
		c := bytes.Clone(b)
		c[i/8] ^= 1 << (i % 8)
		if _, err := decodeStableSlot(c, 1); err == nil {
			t.Fatalf("bit %d flipped: decoded", i)
		}
	}

	r.damaged = strings.Repeat("x", 2*stableSlotSize)
	b, err = r.encode()
	if err != nil {
		t.Fatal(err)
	}
	if got, err = decodeStableSlot(b, 1); err != nil || !strings.HasSuffix(got.damaged, "[cut]") || got.vals[0].String() != "7" {
		t.Fatalf("a long reason: %v, %q", err, got.damaged)
	}
	r.vals[2].b = make([]byte, stableSlotSize)
	if _, err := r.encode(); err == nil {
		t.Fatal("a candidate longer than the slot was encoded")
	}
}

// The cost of a term or vote write, raft-boltdb alone and checked:
//
//	go test -tags hashicorpmetrics -run '^$' -bench StableSet -benchtime 500x ./raftnode/
//
// On a 2-core VM, ext4 on virtio: raft-boltdb about 0.2 ms, checked about
// 0.3 ms with the shadow written in place (the shadow alone, fsync or
// fdatasync alike, about 0.1 ms: stablecheck_linux_test.go), against
// 0.7 to 1.4 ms with the temporary file, rename and directory fsync of
// earlier commits.
func BenchmarkStableSet(b *testing.B) {
	b.Run("raft-boltdb", func(b *testing.B) {
		s := openTestBolt(b, b.TempDir())
		defer s.Close()
		for i := range b.N {
			if err := s.SetUint64(testKeyCT, uint64(i+1)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("checked", func(b *testing.B) {
		cs, s, _ := openChecked(b, b.TempDir())
		defer s.Close()
		for i := range b.N {
			if err := cs.SetUint64(testKeyCT, uint64(i+1)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// raft runs on the checked store: bootstrap (HasExistingState reads a
// missing term as raft's "not found"), an election (setCurrentTerm,
// persistVote), and a restart that finds both records in agreement.
func TestStableUnderRaft(t *testing.T) {
	dir := t.TempDir()
	logs := raft.NewInmemStore()
	for round := range 2 {
		cs, b, d := openChecked(t, dir)
		if d != nil {
			t.Fatalf("round %d: damage %v", round, d)
		}
		_, trans := raft.NewInmemTransport("n1")
		conf := raft.DefaultConfig()
		conf.LocalID = "n1"
		conf.Logger = testLogger(t, "raft")
		conf.HeartbeatTimeout, conf.ElectionTimeout, conf.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
		snaps := raft.NewInmemSnapshotStore()
		if round == 0 {
			servers := raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: trans.LocalAddr(), Suffrage: raft.Voter}}}
			if err := raft.BootstrapCluster(conf, logs, cs, snaps, trans, servers); err != nil {
				t.Fatal(err)
			}
		}
		r, err := raft.NewRaft(conf, &listFSM{}, logs, cs, snaps, trans)
		if err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 5*time.Second, "leader", func() bool { return r.State() == raft.Leader })
		term := r.CurrentTerm()
		if err := r.Shutdown().Error(); err != nil {
			t.Fatal(err)
		}
		trans.Close()
		wantTestVote(t, cs, term, term, string(trans.LocalAddr()))
		b.Close()
	}
}

// pinVote may run while raft reads and writes the store.
func TestStablePinVoteConcurrent(t *testing.T) {
	cs, _, _ := openChecked(t, t.TempDir())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 50 {
			if err := cs.SetUint64(testKeyLVT, uint64(i+1)); err != nil {
				t.Error(err)
			}
			if err := cs.Set(testKeyLVC, []byte("cand")); err != nil {
				t.Error(err)
			}
			if _, err := cs.Get(testKeyLVC); err != nil {
				t.Error(err)
			}
		}
	}()
	for i := range 20 {
		if err := cs.pinVote(uint64(i+1), []byte("leader")); err != nil {
			t.Error(err)
		}
	}
	<-done
}

// wantShadowDamageKept opens the store in dir after its shadow was spoiled:
// damage, the vote of the test's writes still served, the damaged shadow
// kept as .corrupt, and the damage reported again at the next open.
func wantShadowDamageKept(t *testing.T, dir, what string) {
	t.Helper()
	cs, b, d := openChecked(t, dir)
	wantStableDamage(t, d, what)
	wantTestVote(t, cs, 7, 7, "cand-a")
	if _, err := os.Stat(filepath.Join(dir, stableShadowFile) + ".corrupt"); err != nil {
		t.Errorf("the damaged shadow was not kept: %v", err)
	}
	b.Close()
	cs.close()
	_, _, d = openChecked(t, dir)
	wantStableDamage(t, d, "reopened")
}

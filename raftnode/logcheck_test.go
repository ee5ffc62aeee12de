package raftnode

// This file owns the tests and benchmarks of checkedLogs and verifyLog
// (logcheck.go), and the helpers (lc*) that walscan_test.go shares: a
// raft-wal log in a temporary data directory behind checkedLogs, and the
// entries written to it.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
)

const (
	lcBatches  = 40 // batches (one StoreLogs, one commit frame each) per test log
	lcPerBatch = 16 // entries per batch
)

// lcEntries returns n entries from index first, of term, ~200 bytes each.
func lcEntries(first uint64, n int, term uint64) []*raft.Log {
	logs := make([]*raft.Log, n)
	for i := range logs {
		idx := first + uint64(i)
		data := []byte(fmt.Sprintf("entry %08d ", idx))
		for len(data) < 200 {
			data = append(data, byte('a'+idx%26))
		}
		logs[i] = &raft.Log{Index: idx, Term: term, Type: raft.LogCommand, Data: data,
			AppendedAt: time.Unix(1700000000, int64(idx))}
	}
	return logs
}

// lcWAL is a raft-wal log in a data directory, behind checkedLogs.
type lcWAL struct {
	dataDir, walDir string
	w               *wal.WAL
	c               *checkedLogs
}

// lcOpen opens (or reopens) the WAL in dataDir/wal with segments of
// segSize bytes (0: raft-wal's default, 64 MiB) and wraps it.
func lcOpen(t testing.TB, dataDir string, segSize int) *lcWAL {
	t.Helper()
	l := &lcWAL{dataDir: dataDir, walDir: filepath.Join(dataDir, "wal")}
	if err := os.MkdirAll(l.walDir, 0o700); err != nil {
		t.Fatal(err)
	}
	var w *wal.WAL
	var err error
	if segSize > 0 {
		w, err = wal.Open(l.walDir, wal.WithLogger(hclog.NewNullLogger()), wal.WithSegmentSize(segSize))
	} else {
		w, err = wal.Open(l.walDir, wal.WithLogger(hclog.NewNullLogger()))
	}
	if err != nil {
		t.Fatal(err)
	}
	l.w = w
	t.Cleanup(func() { w.Close() })
	if l.c, err = newCheckedLogs(w, dataDir, l.walDir); err != nil {
		t.Fatal(err)
	}
	return l
}

// write appends batches batches of lcPerBatch entries after the last
// index, all of term 1, one StoreLogs each.
func (l *lcWAL) write(t testing.TB, batches int) {
	t.Helper()
	last, _ := l.c.LastIndex()
	for b := range batches {
		if err := l.c.StoreLogs(lcEntries(last+1+uint64(b*lcPerBatch), lcPerBatch, 1)); err != nil {
			t.Fatal(err)
		}
	}
}

// close closes the WAL.
func (l *lcWAL) close(t testing.TB) {
	t.Helper()
	if err := l.w.Close(); err != nil {
		t.Fatal(err)
	}
}

// verify runs verifyLog on the open log.
func (l *lcWAL) verify(t testing.TB) *storageDamage {
	t.Helper()
	d, err := verifyLog(l.c)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// last is raft-wal's LastIndex.
func (l *lcWAL) last(t testing.TB) uint64 {
	t.Helper()
	last, err := l.w.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	return last
}

// wantDamage fails unless d reports the log damaged from index, at path.
func wantDamage(t *testing.T, d *storageDamage, index uint64, path string) {
	t.Helper()
	if d == nil {
		t.Fatalf("no damage found, want it from index %d", index)
	}
	if !errors.Is(d, ErrDamaged) || d.Store != "log" || d.Index != index || d.Path != path {
		t.Fatalf("damage %+v, want Store log, Index %d, Path %s", d, index, path)
	}
	t.Logf("found: %v", d)
}

// wantNoDamage fails if what found damage.
func wantNoDamage(t *testing.T, what string, d *storageDamage) {
	t.Helper()
	if d != nil {
		t.Fatalf("%s found damage in a sound log: %v", what, d)
	}
}

// lcFakeStore is a raft.InmemStore whose GetLog a test can bend.
type lcFakeStore struct {
	*raft.InmemStore
	get func(index uint64, l *raft.Log) error // nil: InmemStore's
}

// GetLog is get, or InmemStore's.
func (s *lcFakeStore) GetLog(index uint64, l *raft.Log) error {
	if s.get != nil {
		return s.get(index, l)
	}
	return s.InmemStore.GetLog(index, l)
}

// lcVariety is one entry of every shape raftnode stores: commands with and
// without Extensions, a checkpoint (its payload in Extensions), a
// configuration, a no-op without data and time, an empty non-nil
// Extensions, and times with nanoseconds in another zone.
func lcVariety() []*raft.Log {
	cp := checkpoint{index: 3, hash: [32]byte{1, 2, 3, 'L', 'C', 'S', '1'}}
	zone := time.FixedZone("x", 5*3600+1800)
	return []*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("grant a"), AppendedAt: time.Unix(1700000000, 123456789)},
		{Index: 2, Term: 1, Type: raft.LogNoop},
		{Index: 3, Term: 2, Type: raft.LogCommand, Extensions: cp.encode(), AppendedAt: time.Unix(1700000001, 1).In(zone)},
		{Index: 4, Term: 2, Type: raft.LogConfiguration, Data: bytes.Repeat([]byte{0xff}, 300), AppendedAt: time.Now()},
		{Index: 5, Term: 3, Type: raft.LogCommand, Data: []byte("x"), Extensions: []byte{}, AppendedAt: time.Now()},
		{Index: 6, Term: 3, Type: raft.LogCommand, Data: []byte("with ext"), Extensions: []byte("LCS1"), AppendedAt: time.Now()},
	}
}

// lcSame reports how got differs from want, as raft sees an entry.
func lcSame(t *testing.T, got, want *raft.Log) {
	t.Helper()
	if got.Index != want.Index || got.Term != want.Term || got.Type != want.Type ||
		!bytes.Equal(got.Data, want.Data) || !bytes.Equal(got.Extensions, want.Extensions) ||
		!got.AppendedAt.Equal(want.AppendedAt) {
		t.Fatalf("read back %+v, stored %+v", got, want)
	}
	if len(want.Extensions) == 0 && got.Extensions != nil {
		t.Fatalf("index %d: Extensions %q, want nil as the store gave it", got.Index, got.Extensions)
	}
}

// TestCheckedLogsRoundTrip: every entry reads back as it was stored, in
// each store, through raft's LogCache as well, and the trailer is in the
// store.
func TestCheckedLogsRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) raft.LogStore
	}{
		{"inmem", func(*testing.T) raft.LogStore { return raft.NewInmemStore() }},
		{"raft-wal", func(t *testing.T) raft.LogStore { return lcOpen(t, t.TempDir(), 0).w }},
		{"raft-boltdb", func(t *testing.T) raft.LogStore {
			b, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(t.TempDir(), "raft.db")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner := tc.store(t)
			c, err := newCheckedLogs(inner, t.TempDir(), tc.name)
			if err != nil {
				t.Fatal(err)
			}
			logs := lcVariety()
			if err := c.StoreLogs(logs); err != nil {
				t.Fatal(err)
			}
			cache, err := raft.NewLogCache(2, c) // too small to hold them all
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range logs {
				var got, raw, cached raft.Log
				if err := c.GetLog(want.Index, &got); err != nil {
					t.Fatalf("GetLog(%d): %v", want.Index, err)
				}
				lcSame(t, &got, want)
				if err := cache.GetLog(want.Index, &cached); err != nil {
					t.Fatalf("LogCache.GetLog(%d): %v", want.Index, err)
				}
				lcSame(t, &cached, want)
				if err := inner.GetLog(want.Index, &raw); err != nil {
					t.Fatal(err)
				}
				if len(raw.Extensions) != len(want.Extensions)+logSumLen || !bytes.HasSuffix(raw.Extensions, logSumMagic[:]) {
					t.Fatalf("index %d is stored without its trailer: %q", want.Index, raw.Extensions)
				}
			}
			var got raft.Log
			if err := c.GetLog(3, &got); err != nil {
				t.Fatal(err)
			}
			if cp, ok := parseCheckpoint(&got); !ok || cp.index != 3 {
				t.Fatalf("the checkpoint entry no longer parses: %+v %v", cp, ok)
			}
			if d, err := verifyLog(c); d != nil || err != nil {
				t.Fatalf("verifyLog: %v %v", d, err)
			}
			if !c.IsMonotonic() || !cache.IsMonotonic() {
				t.Fatal("checkedLogs must be a raft.MonotonicLogStore, through LogCache too")
			}
		})
	}
}

// TestCheckedLogsLeavesTheCallersEntriesAlone: LogCache keeps the
// *raft.Log it passed to StoreLogs and serves it later, so StoreLogs must
// not change it, nor anything it points to.
func TestCheckedLogsLeavesTheCallersEntriesAlone(t *testing.T) {
	c, err := newCheckedLogs(raft.NewInmemStore(), t.TempDir(), "mem")
	if err != nil {
		t.Fatal(err)
	}
	logs := lcVariety()
	before := make([]raft.Log, len(logs))
	exts := make([][]byte, len(logs))
	for i, l := range logs {
		before[i] = *l
		before[i].Data = bytes.Clone(l.Data)
		before[i].Extensions = bytes.Clone(l.Extensions)
		exts[i] = l.Extensions
	}
	if err := c.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	for i, l := range logs {
		b := &before[i]
		if l.Index != b.Index || l.Term != b.Term || l.Type != b.Type || l.AppendedAt != b.AppendedAt ||
			!bytes.Equal(l.Data, b.Data) || !bytes.Equal(l.Extensions, b.Extensions) {
			t.Fatalf("StoreLogs changed the caller's entry: %+v, was %+v", l, b)
		}
		if len(l.Extensions) != len(exts[i]) || cap(l.Extensions) != cap(exts[i]) ||
			len(exts[i]) > 0 && &l.Extensions[0] != &exts[i][0] {
			t.Fatalf("index %d: the caller's Extensions slice changed", l.Index)
		}
	}
}

// lcChecked returns a checkedLogs on an lcFakeStore holding lcVariety,
// and the damage its onDamage callback heard of.
func lcChecked(t *testing.T) (*checkedLogs, *lcFakeStore, *[]*storageDamage) {
	t.Helper()
	inner := &lcFakeStore{InmemStore: raft.NewInmemStore()}
	c, err := newCheckedLogs(inner, t.TempDir(), "mem")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StoreLogs(lcVariety()); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var heard []*storageDamage
	c.setOnDamage(func(d *storageDamage) {
		mu.Lock()
		defer mu.Unlock()
		heard = append(heard, d)
	})
	return c, inner, &heard
}

// lcRestore replaces the stored entry at index by what bend makes of a
// copy of it (trailer included): the disk's doing.
func lcRestore(t *testing.T, inner raft.LogStore, index uint64, bend func(l *raft.Log)) {
	t.Helper()
	var l raft.Log
	if err := inner.GetLog(index, &l); err != nil {
		t.Fatal(err)
	}
	l.Data = bytes.Clone(l.Data)
	l.Extensions = bytes.Clone(l.Extensions)
	bend(&l)
	if err := inner.StoreLog(&l); err != nil {
		t.Fatal(err)
	}
}

// TestCheckedLogsFindsDamage: any change to a stored entry, or an entry
// stored under another index, or missing inside the log's bounds, reads
// as a *storageDamage naming it, and onDamage hears of it; verifyLog
// returns the first such index without calling onDamage.
func TestCheckedLogsFindsDamage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		index uint64
		bend  func(l *raft.Log)
	}{
		{"data", 1, func(l *raft.Log) { l.Data[3] ^= 1 }},
		{"term", 4, func(l *raft.Log) { l.Term++ }},
		{"type", 4, func(l *raft.Log) { l.Type = raft.LogCommand }},
		{"time", 1, func(l *raft.Log) { l.AppendedAt = l.AppendedAt.Add(time.Nanosecond) }},
		{"checkpoint payload", 3, func(l *raft.Log) { l.Extensions[10] ^= 1 }},
		{"checksum", 2, func(l *raft.Log) { l.Extensions[0] ^= 1 }},
		{"magic", 2, func(l *raft.Log) { l.Extensions[len(l.Extensions)-1] ^= 1 }},
		{"trailer cut", 3, func(l *raft.Log) { l.Extensions = l.Extensions[:len(l.Extensions)-logSumLen] }},
		{"extensions lost", 6, func(l *raft.Log) { l.Extensions = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, inner, heard := lcChecked(t)
			lcRestore(t, inner, tc.index, tc.bend)
			d, err := verifyLog(c)
			if err != nil {
				t.Fatal(err)
			}
			wantDamage(t, d, tc.index, "mem")
			if len(*heard) != 0 {
				t.Fatal("verifyLog called onDamage")
			}
			var got raft.Log
			err = c.GetLog(tc.index, &got)
			var gd *storageDamage
			if !errors.Is(err, ErrDamaged) || !errors.As(err, &gd) || gd.Index != tc.index {
				t.Fatalf("GetLog(%d) = %v, want damage at %d", tc.index, err, tc.index)
			}
			if len(*heard) != 1 || (*heard)[0] != gd {
				t.Fatalf("onDamage heard %v", *heard)
			}
			for _, other := range lcVariety() {
				if other.Index != tc.index {
					if err := c.GetLog(other.Index, &got); err != nil {
						t.Fatalf("GetLog(%d) of an intact entry: %v", other.Index, err)
					}
				}
			}
		})
	}
	t.Run("another index", func(t *testing.T) {
		c, inner, heard := lcChecked(t)
		inner.get = func(index uint64, l *raft.Log) error {
			if index == 4 {
				index = 5 // an index that points at the wrong frame
			}
			return inner.InmemStore.GetLog(index, l)
		}
		d, _ := verifyLog(c)
		wantDamage(t, d, 4, "mem")
		var got raft.Log
		if err := c.GetLog(4, &got); !errors.Is(err, ErrDamaged) || len(*heard) != 1 {
			t.Fatalf("GetLog(4) = %v, heard %v", err, *heard)
		}
	})
	t.Run("missing", func(t *testing.T) {
		c, inner, _ := lcChecked(t)
		inner.get = func(index uint64, l *raft.Log) error {
			if index == 3 {
				return raft.ErrLogNotFound
			}
			return inner.InmemStore.GetLog(index, l)
		}
		d, _ := verifyLog(c)
		wantDamage(t, d, 3, "mem")
		var got raft.Log
		if err := c.GetLog(7, &got); err != raft.ErrLogNotFound {
			t.Fatalf("GetLog(7), past the end: %v, want raft.ErrLogNotFound", err)
		}
	})
	t.Run("unreadable", func(t *testing.T) {
		c, inner, _ := lcChecked(t)
		inner.get = func(index uint64, l *raft.Log) error {
			if index == 2 {
				return errors.New("WAL is corrupt: frame header with unknown type 65")
			}
			return inner.InmemStore.GetLog(index, l)
		}
		d, _ := verifyLog(c)
		wantDamage(t, d, 2, "mem")
	})
	t.Run("term goes down", func(t *testing.T) {
		c, inner, heard := lcChecked(t)
		if err := c.StoreLogs([]*raft.Log{{Index: 7, Term: 2, Type: raft.LogCommand}}); err != nil {
			t.Fatal(err)
		}
		_ = inner
		d, _ := verifyLog(c)
		wantDamage(t, d, 7, "mem")
		if len(*heard) != 0 {
			t.Fatal("verifyLog called onDamage")
		}
	})
}

// TestCheckedLogsAcceptsEntriesWrittenBeforeChecksums: a data directory
// written before this change has entries without a trailer. The first
// open records LastIndex+1 in LOG-CHECKSUMS; below it entries may lack a
// trailer, from it on they may not, and reopening does not move it.
func TestCheckedLogsAcceptsEntriesWrittenBeforeChecksums(t *testing.T) {
	dir := t.TempDir()
	inner := raft.NewInmemStore()
	old := lcEntries(1, 10, 1)
	if err := inner.StoreLogs(old); err != nil { // as the old version did
		t.Fatal(err)
	}
	c, err := newCheckedLogs(inner, dir, "mem")
	if err != nil {
		t.Fatal(err)
	}
	if c.since != 11 {
		t.Fatalf("since %d, want 11", c.since)
	}
	for _, want := range old {
		var got raft.Log
		if err := c.GetLog(want.Index, &got); err != nil {
			t.Fatalf("GetLog(%d) of an old entry: %v", want.Index, err)
		}
		lcSame(t, &got, want)
	}
	if err := c.StoreLogs(lcEntries(11, 10, 1)); err != nil {
		t.Fatal(err)
	}
	if d, err := verifyLog(c); d != nil || err != nil {
		t.Fatalf("verifyLog: %v %v", d, err)
	}

	// An entry from 11 on without a trailer: its magic was destroyed, or
	// an old version wrote it.
	if err := inner.StoreLog(lcEntries(21, 1, 1)[0]); err != nil {
		t.Fatal(err)
	}
	var got raft.Log
	if err := c.GetLog(21, &got); !errors.Is(err, ErrDamaged) {
		t.Fatalf("GetLog(21) without a trailer = %v, want ErrDamaged", err)
	}

	// Reopening keeps 11, whatever the log holds now.
	c, err = newCheckedLogs(inner, dir, "mem")
	if err != nil {
		t.Fatal(err)
	}
	if c.since != 11 {
		t.Fatalf("since %d after reopening, want 11", c.since)
	}

	// Entries below 11 written again (a follower's conflicting suffix
	// replaced) carry trailers, and are checked.
	if err := c.DeleteRange(5, 21); err != nil {
		t.Fatal(err)
	}
	if err := c.StoreLogs(lcEntries(5, 3, 2)); err != nil {
		t.Fatal(err)
	}
	if d, err := verifyLog(c); d != nil || err != nil {
		t.Fatalf("verifyLog: %v %v", d, err)
	}
	lcRestore(t, inner, 6, func(l *raft.Log) { l.Data[0] ^= 1 })
	d, err := verifyLog(c)
	if err != nil {
		t.Fatal(err)
	}
	wantDamage(t, d, 6, "mem")
}

// TestLogSumsFile: the record is written once, fsynced and renamed into
// place, and a damaged one is reported, not guessed at.
func TestLogSumsFile(t *testing.T) {
	dir := t.TempDir()
	inner := raft.NewInmemStore()
	if _, err := newCheckedLogs(inner, dir, "mem"); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, logSumsFile)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s", logSumsFile, b)
	if since, err := readLogSumsFile(file); err != nil || since != 1 {
		t.Fatalf("readLogSumsFile: %d %v", since, err)
	}
	for _, bad := range [][]byte{
		bytes.Replace(b, []byte("index 1 "), []byte("index 7 "), 1),
		b[:len(b)/2],
		{},
	} {
		if err := os.WriteFile(file, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := newCheckedLogs(inner, dir, "mem")
		var d *storageDamage
		if !errors.As(err, &d) || !errors.Is(err, ErrDamaged) || d.Path != file {
			t.Fatalf("newCheckedLogs with %q in %s = %v, want a *storageDamage", bad, logSumsFile, err)
		}
	}
}

// lcDiscard is a log store that keeps nothing: the wrapper's own cost.
type lcDiscard struct{ raft.InmemStore }

// StoreLogs keeps nothing.
func (*lcDiscard) StoreLogs([]*raft.Log) error { return nil }

// BenchmarkStoreLogs appends batches of 256 entries of 200 bytes with and
// without checkedLogs: to raft-wal (an fsync per batch) and to a store
// that keeps nothing (the wrapper's CPU cost alone).
func BenchmarkStoreLogs(b *testing.B) {
	for _, tc := range []struct {
		name    string
		checked bool
		wal     bool
	}{
		{"discard", false, false},
		{"discard+checked", true, false},
		{"raft-wal", false, true},
		{"raft-wal+checked", true, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var store raft.LogStore = &lcDiscard{}
			if tc.wal {
				store = lcOpen(b, b.TempDir(), 0).w
			}
			if tc.checked {
				c, err := newCheckedLogs(store, b.TempDir(), "bench")
				if err != nil {
					b.Fatal(err)
				}
				store = c
			}
			logs := lcEntries(1, 256, 1)
			next := uint64(1)
			b.SetBytes(256 * 200)
			b.ReportAllocs()
			for b.Loop() {
				for i, l := range logs {
					l.Index = next + uint64(i)
				}
				next += uint64(len(logs))
				if err := store.StoreLogs(logs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// lcBenchLog writes 100,000 entries of ~200 bytes through checkedLogs into
// raft-wal, in batches of 256.
func lcBenchLog(b *testing.B) *lcWAL {
	b.Helper()
	l := lcOpen(b, b.TempDir(), 0)
	const n, batch = 100_000, 256
	for i := uint64(1); i <= n; i += batch {
		if err := l.c.StoreLogs(lcEntries(i, int(min(batch, n-i+1)), 1)); err != nil {
			b.Fatal(err)
		}
	}
	return l
}

// BenchmarkVerifyLog reads a log of 100,000 entries of ~200 bytes in
// raft-wal from start to end: verifyLog through checkedLogs, and the same
// reads from raft-wal alone.
func BenchmarkVerifyLog(b *testing.B) {
	l := lcBenchLog(b)
	b.Run("verifyLog", func(b *testing.B) {
		for b.Loop() {
			if d, err := verifyLog(l.c); d != nil || err != nil {
				b.Fatal(d, err)
			}
		}
	})
	b.Run("raft-wal alone", func(b *testing.B) {
		var e raft.Log
		for b.Loop() {
			for i := uint64(1); i <= 100_000; i++ {
				if err := l.w.GetLog(i, &e); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

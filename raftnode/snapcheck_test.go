// snapcheck_test.go tests snapcheck.go on real snapshot files: written by
// a real node, or by raft's FileSnapshotStore in t.TempDir(), damaged by
// flipping bytes, and restarted by raft.NewRaft with and without the check.

package raftnode

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

// snapTestDataDir runs a one-node cluster in a new data directory: 10
// entries, a snapshot, 10 more, a snapshot, one more, then stops it. It
// returns the directory and the two snapshots' IDs, oldest first.
func snapTestDataDir(t *testing.T, trailingLogs uint64) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	n, _, err := startOn(t, dir, func(c *Config) {
		c.Bootstrap = []Peer{{ID: "n1"}}
		c.snapshotThreshold = 1 << 30 // only the snapshots asked for
		c.trailingLogs = trailingLogs
	})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "leader", n.IsLeader)
	for _, batch := range []string{"a", "b"} {
		for i := range 10 {
			propose(t, n, fmt.Sprint(batch, i))
		}
		if _, err := n.Snapshot(ctxTimeout(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	propose(t, n, "c")
	if err := n.Shutdown(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(snapshotsDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.Name())
	}
	slices.SortFunc(ids, func(a, b string) int {
		sa, _ := parseSnapshotName(a)
		sb, _ := parseSnapshotName(b)
		return int(sa.index) - int(sb.index)
	})
	if len(ids) != 2 {
		t.Fatalf("snapshots: %v", ids)
	}
	return dir, ids
}

// copyTree copies the directory src into a new temporary directory.
func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o700)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// flipSnapshotState flips a byte in the middle of a snapshot's state.bin.
func flipSnapshotState(t *testing.T, dir, id string) {
	t.Helper()
	path := filepath.Join(dir, id, "state.bin")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	flipByteAt(t, path, st.Size()/2, 0x40)
}

// restartResult is what a restart of a data directory by raft.NewRaft did.
type restartResult struct {
	panicked any
	err      error
	damage   *storageDamage
	entries  []string // the state machine after NewRaft (restored from a snapshot)
	last     uint64   // raft's LastIndex
}

// restartRaft starts raft on a data directory as node.go's open does (the
// WAL, raft.db as the stable store, the file snapshot store on
// DataDir/snapshots behind trackingSnapshots), on an in-memory transport,
// optionally (check) after removePartialSnapshots and checkSnapshots and
// with meta.sum verified at Open (checkedSnapshots), and stops it.
func restartRaft(t *testing.T, dir string, check bool) restartResult {
	t.Helper()
	logger := testLogger(t, "restart")
	w, err := wal.Open(filepath.Join(dir, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	stable, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer stable.Close()
	var res restartResult
	if check {
		if err := removePartialSnapshots(snapshotsDir(dir), logger); err != nil {
			t.Fatal(err)
		}
		if res.damage, err = checkSnapshots(snapshotsDir(dir), w, logger); err != nil {
			t.Fatal(err)
		}
	}
	fileSnaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(dir, "snapshots"), snapshotsRetained, logger)
	if err != nil {
		t.Fatal(err)
	}
	var snaps raft.SnapshotStore = fileSnaps
	if check {
		snaps = newCheckedSnapshots(fileSnaps, filepath.Join(dir, "snapshots"), logger)
	}
	fsm := &listFSM{}
	res.panicked, res.err, res.last = startStopRaft(t, fsm, w, stable, trackingSnapshots{snaps}, logger)
	res.entries = fsm.Entries()
	return res
}

// startStopRaft runs raft.NewRaft, recovering a panic, and shuts the
// instance down if one started.
func startStopRaft(t *testing.T, fsm raft.FSM, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore, logger hclog.Logger) (panicked any, err error, last uint64) {
	t.Helper()
	_, trans := raft.NewInmemTransport("")
	defer trans.Close()
	conf := raft.DefaultConfig()
	conf.LocalID = "n1"
	conf.Logger = logger.Named("raft")
	var r *raft.Raft
	func() {
		defer func() { panicked = recover() }()
		r, err = raft.NewRaft(conf, newTrackingFSM(fsm, logger), logs, stable, snaps, trans)
	}()
	if r != nil {
		last = r.LastIndex()
		if err := r.Shutdown().Error(); err != nil {
			t.Fatal(err)
		}
	}
	return panicked, err, last
}

// entriesThrough lists the entries snapTestDataDir proposed in the given
// batches ("a", "b": ten each; "c": one).
func entriesThrough(prefixes ...string) []string {
	var out []string
	for _, p := range prefixes {
		if p == "c" {
			out = append(out, "c")
			continue
		}
		for i := range 10 {
			out = append(out, fmt.Sprint(p, i))
		}
	}
	return out
}

// Problem 2 of the fault-injection run: a byte flipped in the newest
// snapshot of a stopped node. raft skips the snapshot (its CRC fails in
// FileSnapshotStore.Open) and restores the older one; whether the node
// starts then depends on the log. With TrailingLogs small enough that the
// log no longer reaches back to the older snapshot (the production
// defaults, 16384 entries between snapshots and 10240 kept, are such),
// NewRaft panics with "log not found" reading the first missing entry, at
// every start; with both snapshots corrupt, NewRaft fails. With
// checkSnapshots first, the node starts every time, and reports damage
// exactly when it lost entries.
func TestCorruptNewestSnapshotRestart(t *testing.T) {
	t.Run("log-does-not-cover", func(t *testing.T) {
		dir, ids := snapTestDataDir(t, 2)
		flipSnapshotState(t, snapshotsDir(dir), ids[1])
		older, _ := parseSnapshotName(ids[0])

		today := restartRaft(t, copyTree(t, dir), false)
		if today.panicked == nil || !strings.Contains(fmt.Sprint(today.panicked), "log not found") {
			t.Fatalf("hashicorp/raft alone: panic %v, err %v; want a panic, log not found", today.panicked, today.err)
		}
		t.Logf("hashicorp/raft alone: NewRaft panics: %v", today.panicked)

		res := restartRaft(t, dir, true)
		if res.panicked != nil || res.err != nil {
			t.Fatalf("with checkSnapshots: panic %v, err %v", res.panicked, res.err)
		}
		if res.damage == nil || res.damage.Store != "snapshot" || res.damage.Index != older.index+1 {
			t.Fatalf("damage %+v, want Store snapshot, Index %d", res.damage, older.index+1)
		}
		t.Logf("with checkSnapshots: %v", res.damage)
		if want := entriesThrough("a"); !slices.Equal(res.entries, want) || res.last != older.index {
			t.Fatalf("restored %v, last index %d; want %v, %d", res.entries, res.last, want, older.index)
		}
		if _, err := os.Stat(filepath.Join(dir, "snapshots", ids[1]+snapshotCorruptSuffix, "state.bin")); err != nil {
			t.Fatalf("the corrupt snapshot was not kept: %v", err)
		}
		// The next start finds nothing more to do, and starts the same way.
		if res := restartRaft(t, dir, true); res.damage != nil || res.panicked != nil || res.err != nil || res.last != older.index {
			t.Fatalf("second start: %+v", res)
		}
	})

	t.Run("log-covers", func(t *testing.T) {
		dir, ids := snapTestDataDir(t, 10240)
		flipSnapshotState(t, snapshotsDir(dir), ids[1])
		today := restartRaft(t, copyTree(t, dir), false)
		if today.panicked != nil || today.err != nil {
			t.Fatalf("hashicorp/raft alone: panic %v, err %v", today.panicked, today.err)
		}
		res := restartRaft(t, dir, true)
		if res.damage != nil || res.panicked != nil || res.err != nil {
			t.Fatalf("with checkSnapshots: %+v", res)
		}
		if want := entriesThrough("a"); !slices.Equal(res.entries, want) || res.last != today.last {
			t.Fatalf("restored %v, last index %d; want %v, %d", res.entries, res.last, want, today.last)
		}
	})

	t.Run("all-corrupt", func(t *testing.T) {
		dir, ids := snapTestDataDir(t, 2)
		for _, id := range ids {
			flipSnapshotState(t, snapshotsDir(dir), id)
		}
		today := restartRaft(t, copyTree(t, dir), false)
		if today.err == nil || !strings.Contains(today.err.Error(), "failed to load any existing snapshots") {
			t.Fatalf("hashicorp/raft alone: panic %v, err %v; want failed to load any existing snapshots", today.panicked, today.err)
		}
		t.Logf("hashicorp/raft alone: NewRaft fails: %v", today.err)
		res := restartRaft(t, dir, true)
		if res.panicked != nil || res.err != nil {
			t.Fatalf("with checkSnapshots: panic %v, err %v", res.panicked, res.err)
		}
		if res.damage == nil || res.damage.Index != 1 || len(res.entries) != 0 || res.last != 0 {
			t.Fatalf("damage %+v, entries %v, last %d; want damage from index 1 and an empty node", res.damage, res.entries, res.last)
		}
	})
}

// snapFixture is a snapshot directory written by raft's FileSnapshotStore
// and a log in memory.
type snapFixture struct {
	base  string // what node.go passes to NewFileSnapshotStoreWithLogger
	dir   string // snapshotsDir
	store *raft.FileSnapshotStore
	logs  *raft.InmemStore
	ids   []string // oldest first
}

// newSnapFixture opens an empty FileSnapshotStore in a temporary directory.
func newSnapFixture(t *testing.T) *snapFixture {
	t.Helper()
	f := &snapFixture{base: filepath.Join(t.TempDir(), "snapshots"), logs: raft.NewInmemStore()}
	f.dir = filepath.Join(f.base, "snapshots")
	var err error
	if f.store, err = raft.NewFileSnapshotStoreWithLogger(f.base, snapshotsRetained, testLogger(t, "snapshots")); err != nil {
		t.Fatal(err)
	}
	if f.dir != snapshotsDir(filepath.Dir(f.base)) {
		t.Fatalf("snapshotsDir: %s, want %s", snapshotsDir(filepath.Dir(f.base)), f.dir)
	}
	return f
}

var snapTestConf = raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: "n1", Suffrage: raft.Voter}}}

// snapTestTrans is the transport FileSnapshotStore.Create encodes the
// configuration's addresses with (encodePeers).
func snapTestTrans(t testing.TB) raft.Transport {
	_, trans := raft.NewInmemTransport("n1")
	t.Cleanup(func() { trans.Close() })
	return trans
}

// snapshot writes a complete snapshot at index, holding entries e1..e<index>
// as listFSM restores them.
func (f *snapFixture) snapshot(t *testing.T, index uint64) {
	t.Helper()
	sink, err := f.store.Create(1, index, 1, snapTestConf, 1, snapTestTrans(t))
	if err != nil {
		t.Fatal(err)
	}
	var entries []string
	for i := uint64(1); i <= index; i++ {
		entries = append(entries, fmt.Sprint("e", i))
	}
	if err := json.NewEncoder(sink).Encode(entries); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	f.ids = append(f.ids, sink.ID())
	time.Sleep(2 * time.Millisecond) // snapshot IDs end in milliseconds
}

// log stores entries first..last of term 1 (the first one the configuration).
func (f *snapFixture) log(t *testing.T, first, last uint64) {
	t.Helper()
	for i := first; i <= last; i++ {
		l := &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte(fmt.Sprint("e", i))}
		if i == 1 {
			l.Type, l.Data = raft.LogConfiguration, raft.EncodeConfiguration(snapTestConf)
		}
		if err := f.logs.StoreLog(l); err != nil {
			t.Fatal(err)
		}
	}
}

// start runs raft.NewRaft on the fixture, as node.go would after
// checkSnapshots, and reports whether it started and its last index.
func (f *snapFixture) start(t *testing.T) (panicked any, err error, last uint64) {
	t.Helper()
	stable := raft.NewInmemStore()
	stable.SetUint64([]byte("CurrentTerm"), 1)
	return startStopRaft(t, &listFSM{}, f.logs, stable, f.store, testLogger(t, "n1"))
}

// check runs checkSnapshots on the fixture and logs the damage it reports.
func (f *snapFixture) check(t *testing.T) *storageDamage {
	t.Helper()
	d, err := checkSnapshots(f.dir, f.logs, testLogger(t, "check"))
	if err != nil {
		t.Fatal(err)
	}
	if d != nil {
		t.Logf("damage: %v", d)
	}
	return d
}

// listed returns the IDs raft's FileSnapshotStore.List returns, newest first.
func (f *snapFixture) listed(t *testing.T) []string {
	t.Helper()
	metas, err := f.store.List()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range metas {
		ids = append(ids, m.ID)
	}
	return ids
}

// checkSnapshots on each shape of log a corrupt newest snapshot can meet;
// raft starts after it in every case.
func TestCheckSnapshots(t *testing.T) {
	for _, tc := range []struct {
		name        string
		corrupt     []int  // which of the snapshots at 10 and 20
		first, last uint64 // the log; 0, 0: empty
		wantIndex   uint64 // the damage's Index; 0: no damage
		wantLast    uint64 // raft's last index after the check
		wantLog     bool   // the log is kept
	}{
		{name: "intact", first: 15, last: 25, wantLast: 25, wantLog: true},
		{name: "older-corrupt-not-read", corrupt: []int{0}, first: 15, last: 25, wantLast: 25, wantLog: true},
		{name: "newest-corrupt-log-covers", corrupt: []int{1}, first: 5, last: 25, wantLast: 25, wantLog: true},
		{name: "newest-corrupt-log-gap", corrupt: []int{1}, first: 15, last: 25, wantIndex: 11, wantLast: 10},
		{name: "newest-corrupt-log-empty", corrupt: []int{1}, wantIndex: 11, wantLast: 10}, // a follower that installed the snapshot
		{name: "newest-corrupt-log-short", corrupt: []int{1}, first: 8, last: 15, wantIndex: 16, wantLast: 15, wantLog: true},
		{name: "all-corrupt-log-from-1", corrupt: []int{0, 1}, first: 1, last: 25, wantLast: 25, wantLog: true},
		{name: "all-corrupt-log-gap", corrupt: []int{0, 1}, first: 15, last: 25, wantIndex: 1, wantLast: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSnapFixture(t)
			f.snapshot(t, 10)
			f.snapshot(t, 20)
			if tc.last > 0 {
				f.log(t, tc.first, tc.last)
			}
			for _, i := range tc.corrupt {
				flipSnapshotState(t, f.dir, f.ids[i])
			}
			d := f.check(t)
			switch {
			case tc.wantIndex == 0 && d != nil:
				t.Fatalf("damage %v; want none", d)
			case tc.wantIndex != 0 && (d == nil || d.Store != "snapshot" || d.Index != tc.wantIndex || d.Reason == ""):
				t.Fatalf("damage %+v; want Store snapshot, Index %d", d, tc.wantIndex)
			}
			last, _ := f.logs.LastIndex()
			if kept := last == tc.last; kept != tc.wantLog && tc.last > 0 {
				t.Fatalf("log last %d after the check; kept: %v, want %v", last, kept, tc.wantLog)
			}
			// The newest snapshot was corrupt: it is out of raft's sight, kept.
			if slices.Contains(tc.corrupt, 1) {
				if slices.Contains(f.listed(t), f.ids[1]) {
					t.Fatalf("raft still lists %s", f.ids[1])
				}
				if _, err := os.Stat(filepath.Join(f.base, f.ids[1]+snapshotCorruptSuffix, "meta.json")); err != nil {
					t.Fatal(err)
				}
			} else if len(tc.corrupt) > 0 {
				// Only the newest verifies are read: an older one raft will
				// not restore stays, to be checked if it is ever needed.
				if !slices.Contains(f.listed(t), f.ids[0]) {
					t.Fatal("the older snapshot was set aside")
				}
			}
			panicked, err, raftLast := f.start(t)
			if panicked != nil || err != nil {
				t.Fatalf("raft.NewRaft after the check: panic %v, err %v", panicked, err)
			}
			if raftLast != tc.wantLast {
				t.Fatalf("raft's last index %d, want %d", raftLast, tc.wantLast)
			}
		})
	}
}

// A damaged meta.json is found, whichever field the damage hits, and so
// are a short or missing state.bin.
func TestCheckSnapshotsMeta(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, snap string)
	}{
		{"index-digit", func(t *testing.T, snap string) {
			editFile(t, filepath.Join(snap, "meta.json"), `"Index":20`, `"Index":29`)
		}},
		{"term-digit", func(t *testing.T, snap string) { editFile(t, filepath.Join(snap, "meta.json"), `"Term":1`, `"Term":3`) }},
		{"size-digit", func(t *testing.T, snap string) { editFile(t, filepath.Join(snap, "meta.json"), `"Size":`, `"Size":1`) }},
		{"field-name", func(t *testing.T, snap string) { editFile(t, filepath.Join(snap, "meta.json"), `"Peers"`, `"Peerz"`) }},
		{"not-json", func(t *testing.T, snap string) { editFile(t, filepath.Join(snap, "meta.json"), `{`, `[`) }},
		{"trailing-bytes", func(t *testing.T, snap string) { editFile(t, filepath.Join(snap, "meta.json"), "}\n", "}\n{}") }},
		{"state-short", func(t *testing.T, snap string) {
			if err := os.Truncate(filepath.Join(snap, "state.bin"), 3); err != nil {
				t.Fatal(err)
			}
		}},
		{"state-missing", func(t *testing.T, snap string) {
			if err := os.Remove(filepath.Join(snap, "state.bin")); err != nil {
				t.Fatal(err)
			}
		}},
		{"meta-missing", func(t *testing.T, snap string) {
			if err := os.Remove(filepath.Join(snap, "meta.json")); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSnapFixture(t)
			f.snapshot(t, 10)
			f.snapshot(t, 20)
			f.log(t, 5, 25)
			tc.damage(t, filepath.Join(f.dir, f.ids[1]))
			if d := f.check(t); d != nil {
				t.Fatalf("damage %v; want none (the log covers)", d)
			}
			if _, err := os.Stat(filepath.Join(f.base, f.ids[1]+snapshotCorruptSuffix)); err != nil {
				t.Fatalf("not set aside: %v", err)
			}
			if got := f.listed(t); !slices.Equal(got, f.ids[:1]) {
				t.Fatalf("raft lists %v, want %v", got, f.ids[:1])
			}
		})
	}
}

// editFile replaces the first old in a file by new; the test fails if
// there is none.
func editFile(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("%s has no %q: %s", path, old, b)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Why a corrupt snapshot leaves raft's directory rather than being renamed
// in it: FileSnapshotStore lists a renamed snapshot still (getSnapshots
// skips only .tmp names), under its old ID, which no longer opens.
func TestRenamedSnapshotIsStillListed(t *testing.T) {
	f := newSnapFixture(t)
	f.snapshot(t, 10)
	f.snapshot(t, 20)
	if err := os.Rename(filepath.Join(f.dir, f.ids[1]), filepath.Join(f.dir, f.ids[1]+snapshotCorruptSuffix)); err != nil {
		t.Fatal(err)
	}
	if got := f.listed(t); !slices.Equal(got, []string{f.ids[1], f.ids[0]}) {
		t.Fatalf("raft lists %v; if it no longer lists renamed snapshots, checkSnapshots may rename them in place", got)
	}
	if _, _, err := f.store.Open(f.ids[1]); err == nil {
		t.Fatal("the renamed snapshot opens")
	}
}

// A snapshot being written when the node was killed stays as <id>.tmp for
// ever (raft skips it and never removes it); removePartialSnapshots removes
// it and nothing else.
func TestRemovePartialSnapshots(t *testing.T) {
	f := newSnapFixture(t)
	f.snapshot(t, 10)
	sink, err := f.store.Create(1, 20, 1, snapTestConf, 1, snapTestTrans(t))
	if err != nil {
		t.Fatal(err)
	}
	sink.Write([]byte("partial"))
	if err := os.WriteFile(filepath.Join(f.dir, "not-a-dir.tmp"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	partial := filepath.Join(f.dir, sink.ID()+snapshotTmpSuffix)
	if _, err := os.Stat(partial); err != nil {
		t.Fatalf("FileSnapshotStore.Create does not write into %s: %v", partial, err)
	}
	if err := removePartialSnapshots(f.dir, testLogger(t, "check")); err != nil {
		t.Fatal(err)
	}
	sink.Cancel() // closes the file; the directory is gone already
	if _, err := os.Stat(partial); !os.IsNotExist(err) {
		t.Fatalf("%s: %v", partial, err)
	}
	if got := f.listed(t); !slices.Equal(got, f.ids) {
		t.Fatalf("raft lists %v, want %v", got, f.ids)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "not-a-dir.tmp")); err != nil {
		t.Fatal("removed a file")
	}
	if err := removePartialSnapshots(filepath.Join(f.dir, "missing"), testLogger(t, "check")); err != nil {
		t.Fatal(err)
	}
}

// The cost of checkSnapshots at start: it reads the newest snapshot once
// more (raft reads it twice: FileSnapshotStore.Open's CRC, then Restore).
//
//	go test -tags hashicorpmetrics -run '^$' -bench CheckSnapshots ./raftnode/
func BenchmarkCheckSnapshots(b *testing.B) {
	const size = 64 << 20
	base := filepath.Join(b.TempDir(), "snapshots")
	store, err := raft.NewFileSnapshotStoreWithLogger(base, snapshotsRetained, hclog.NewNullLogger())
	if err != nil {
		b.Fatal(err)
	}
	sink, err := store.Create(1, 10, 1, snapTestConf, 1, snapTestTrans(b))
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i * 7)
	}
	for range size / len(chunk) {
		sink.Write(chunk)
	}
	if err := sink.Close(); err != nil {
		b.Fatal(err)
	}
	logs := raft.NewInmemStore()
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		if d, err := checkSnapshots(filepath.Join(base, "snapshots"), logs, hclog.NewNullLogger()); d != nil || err != nil {
			b.Fatal(d, err)
		}
	}
}

//go:build linux

package raftnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/types"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

// bufferLogger logs to buf and to t.Log.
func bufferLogger(t testing.TB, buf *testutil.Buffer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "guard", Output: io.MultiWriter(buf, testutil.LogWriter(t)), Level: hclog.Info})
}

// fenceRecorder stands for the node's storage fence.
type fenceRecorder struct {
	raised, lowered atomic.Int32
	last            atomic.Pointer[error]
}

func (f *fenceRecorder) raise(err error) { f.raised.Add(1); f.last.Store(&err) }
func (f *fenceRecorder) lower()          { f.lowered.Add(1) }

func entry(i uint64, size int) *raft.Log {
	return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i)}, size)}
}

// A write that fails for want of space (raft-wal cannot create its next
// segment) raises the fence once, with an error that names the directory,
// the free space and the cause, and logs it once; later writes fail at
// once; reads go on, also while the log is reopened; once the ballast is
// gone the guard reopens the log in this process and writes work again,
// across further rotations.
func TestDiskGuardReopensWhenSpaceReturns(t *testing.T) {
	mnt := testutil.Tmpfs(t, 8<<20)
	dir := filepath.Join(mnt, "wal")
	stale := filepath.Join(dir, ".space-probe-123") // a probe a crash left behind
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs testutil.Buffer
	g, err := openWAL(dir, walOptions{}, bufferLogger(t, &logs))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("a stale space probe is still there: %v", err)
	}
	if g.segSize != 2<<20 {
		t.Fatalf("segment size on an 8 MiB tmpfs: %d, want 2 MiB", g.segSize)
	}
	g.retry = 20 * time.Millisecond
	var fence fenceRecorder
	g.attach(fence.raise, fence.lower, nil)

	bal := testutil.Ballast(t, mnt, 256<<10)
	var last uint64
	var werr error
	for i := uint64(1); i < 5000; i++ {
		if werr = g.StoreLogs([]*raft.Log{entry(i, 1000)}); werr != nil {
			break
		}
		last = i
	}
	if werr == nil {
		t.Fatal("5 MB of entries fit in 256 KiB: no write failed")
	}
	if !errors.Is(werr, ErrStorage) {
		t.Fatalf("write error %v does not match ErrStorage", werr)
	}
	for _, want := range []string{dir, "free of", "no space left on device"} {
		if !strings.Contains(werr.Error(), want) {
			t.Errorf("write error %q does not say %q", werr, want)
		}
	}
	t.Logf("failed after index %d: %v", last, werr)
	if err := g.StoreLogs([]*raft.Log{entry(last+1, 10)}); err != werr {
		t.Errorf("a write while failing: %v, want the same error at once", err)
	}
	if err := g.DeleteRange(1, 10); err != werr {
		t.Errorf("a delete while failing: %v, want the same error at once", err)
	}
	if fence.raised.Load() != 1 {
		t.Errorf("fence raised %d times, want once", fence.raised.Load())
	}
	if n := strings.Count(logs.String(), "STORAGE FAILING"); n != 1 {
		t.Errorf("%d ERROR lines for the failure, want 1:\n%s", n, logs.String())
	}

	// Readers all along, as raft's goroutines read: never an error.
	ctx, stop := context.WithCancel(context.Background())
	var readErrs atomic.Int64
	var firstReadErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(r); ctx.Err() == nil; i++ {
				var l raft.Log
				idx := 1 + i%last
				err := g.GetLog(idx, &l)
				if err == nil && l.Index != idx {
					err = fmt.Errorf("GetLog(%d) gave index %d", idx, l.Index)
				}
				if err == nil {
					_, err = g.LastIndex()
				}
				if err == nil {
					_, err = g.FirstIndex()
				}
				if err != nil && readErrs.Add(1) == 1 {
					firstReadErr.Store(&err)
				}
			}
		}()
	}

	time.Sleep(100 * time.Millisecond) // the guard polls; it must not reopen while full
	if fence.lowered.Load() != 0 {
		t.Fatal("fence lowered while the disk is still full")
	}
	if err := os.Remove(bal); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "the fence to come down", func() bool { return fence.lowered.Load() == 1 })
	if g.Failing() != nil {
		t.Fatalf("still failing: %v", g.Failing())
	}
	for i := last + 1; i < last+3000; i++ { // three more rotations
		if err := g.StoreLogs([]*raft.Log{entry(i, 1000)}); err != nil {
			t.Fatalf("write %d after the reopen: %v", i, err)
		}
	}
	stop()
	wg.Wait()
	if n := readErrs.Load(); n > 0 {
		t.Fatalf("%d reads failed, first: %v", n, *firstReadErr.Load())
	}
	for _, i := range []uint64{1, last, last + 1, last + 2999} {
		var l raft.Log
		if err := g.GetLog(i, &l); err != nil || l.Index != i || len(l.Data) != 1000 {
			t.Fatalf("GetLog(%d) = %d, %d bytes, %v", i, l.Index, len(l.Data), err)
		}
	}
	if !strings.Contains(logs.String(), "takes writes again") {
		t.Errorf("no log line for the recovery:\n%s", logs.String())
	}
}

// A deletion of the log's tail on a full disk fails before raft-wal
// commits it: raft-wal would commit it to its metadata, fail to create the
// new segment, and a reopen would then show a log shorter than raft
// believes it is.
func TestDiskGuardTruncatesOnlyWithRoom(t *testing.T) {
	mnt := testutil.Tmpfs(t, 8<<20)
	dir := filepath.Join(mnt, "wal")
	g, err := openWAL(dir, walOptions{}, testLogger(t, "guard"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	g.retry = 20 * time.Millisecond
	var fence fenceRecorder
	g.attach(fence.raise, fence.lower, nil)
	for i := uint64(1); i <= 100; i++ {
		if err := g.StoreLogs([]*raft.Log{entry(i, 1000)}); err != nil {
			t.Fatal(err)
		}
	}
	bal := testutil.Ballast(t, mnt, 256<<10)
	if err := g.DeleteRange(91, 100); !errors.Is(err, ErrStorage) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("deleting the tail on a full disk: %v, want ErrStorage and ENOSPC", err)
	}
	if err := os.Remove(bal); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "the fence to come down", func() bool { return fence.lowered.Load() == 1 })
	if last, err := g.LastIndex(); err != nil || last != 100 {
		t.Fatalf("after the failed deletion and a reopen the log ends at %d (%v), want 100", last, err)
	}
	if err := g.DeleteRange(91, 100); err != nil {
		t.Fatal(err)
	}
	if err := g.StoreLogs([]*raft.Log{entry(91, 10)}); err != nil {
		t.Fatal(err)
	}
}

// failingMeta is raft-wal's metadata store, whose commits fail while fail
// is set.
type failingMeta struct {
	*metadb.BoltMetaDB
	fail atomic.Bool
}

func (m *failingMeta) CommitState(s types.PersistentState) error {
	if m.fail.Load() {
		return fmt.Errorf("commit: %w", syscall.ENOSPC)
	}
	return m.BoltMetaDB.CommitState(s)
}

// When the metadata commit of a rotation fails, the tail is sealed on disk
// but not in the metadata, and raft-wal reopens it sealed: "segment is
// sealed" for ever, even after a restart. The guard's reopen completes the
// rotation first.
func TestDiskGuardCompletesAHalfRecordedRotation(t *testing.T) {
	dir := t.TempDir()
	const seg = 64 << 10
	meta := &failingMeta{BoltMetaDB: &metadb.BoltMetaDB{}}
	opens := 0
	open := func() (*wal.WAL, error) {
		opens++
		if opens == 1 {
			return wal.Open(dir, wal.WithSegmentSize(seg), wal.WithMetaStore(meta))
		}
		return wal.Open(dir, wal.WithSegmentSize(seg))
	}
	var logs testutil.Buffer
	g, err := newDiskGuard(dir, seg, open, bufferLogger(t, &logs))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	g.retry = 20 * time.Millisecond
	var fence fenceRecorder
	g.attach(fence.raise, fence.lower, nil)

	for i := uint64(1); i <= 10; i++ {
		if err := g.StoreLogs([]*raft.Log{entry(i, 500)}); err != nil {
			t.Fatal(err)
		}
	}
	meta.fail.Store(true)
	var last uint64 = 10
	for ; last < 1000; last++ {
		if err := g.StoreLogs([]*raft.Log{entry(last+1, 500)}); err != nil {
			if !errors.Is(err, wal.ErrSealed) {
				t.Fatalf("write %d: %v, want raft-wal's sealed segment", last+1, err)
			}
			break
		}
	}
	testutil.Eventually(t, 5*time.Second, "the fence to come down", func() bool { return fence.lowered.Load() == 1 })
	if !strings.Contains(logs.String(), "completed a segment rotation") {
		t.Errorf("the rotation was not completed:\n%s", logs.String())
	}
	for i := last + 1; i < last+500; i++ {
		if err := g.StoreLogs([]*raft.Log{entry(i, 500)}); err != nil {
			t.Fatalf("write %d after the reopen: %v", i, err)
		}
	}
	for i := uint64(1); i < last+500; i++ {
		var l raft.Log
		if err := g.GetLog(i, &l); err != nil || l.Index != i {
			t.Fatalf("GetLog(%d) = %d, %v", i, l.Index, err)
		}
	}
}

// Segments fit the volume: 64 MiB when there is room for four, a whole
// number of MiB below that, and no start below four of 1 MiB.
func TestSegmentSizeFitsTheVolume(t *testing.T) {
	for _, c := range []struct {
		free uint64
		want int
	}{
		{1 << 40, 64 << 20},
		{256 << 20, 64 << 20},
		{255 << 20, 63 << 20},
		{64 << 20, 16 << 20},
		{63<<20 + 512<<10, 15 << 20},
		{4 << 20, 1 << 20},
	} {
		got, err := segmentSizeFree("/d", c.free)
		if err != nil || got != c.want {
			t.Errorf("%s free: %s, %v; want %s", fmtBytes(c.free), fmtBytes(uint64(got)), err, fmtBytes(uint64(c.want)))
		}
	}
	_, err := segmentSizeFree("/data/wal", 4<<20-1)
	if err == nil {
		t.Fatal("just under 4 MiB free: no error")
	}
	for _, want := range []string{"/data/wal", "3.9 MiB free", "at least 4.0 MiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// A node starts on a 64 MiB volume (raft-wal's 64 MiB segments would not
// fit), and a 2 MiB volume refuses to start with an error that says why.
func TestNodeStartsOnASmallVolume(t *testing.T) {
	mnt := testutil.Tmpfs(t, 64<<20)
	n, f, err := startOn(t, mnt, func(c *Config) { c.Bootstrap = []Peer{{ID: "n1"}} })
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "leader", n.IsLeader)
	propose(t, n, "a", "b")
	if got := f.Entries(); len(got) != 2 {
		t.Fatalf("entries %q", got)
	}

	tiny := testutil.Tmpfs(t, 2<<20)
	_, _, err = startOn(t, tiny, func(c *Config) { c.Bootstrap = []Peer{{ID: "n1"}} })
	if err == nil {
		t.Fatal("a node started on a 2 MiB volume")
	}
	for _, want := range []string{tiny, "free", "at least 4.0 MiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// A one-node cluster whose disk fills: its write fails, it steps down and
// is fenced (Unfit matches ErrStorage and names the directory); once the
// ballast is gone it leads and takes proposals again, with no restart.
func TestFullDiskNodeRecoversWithoutRestart(t *testing.T) {
	mnt := testutil.Tmpfs(t, 8<<20)
	n, f, err := startOn(t, mnt, func(c *Config) { c.Bootstrap = []Peer{{ID: "n1"}} })
	if err != nil {
		t.Fatal(err)
	}
	n.stores.wal.retry = 50 * time.Millisecond
	testutil.Eventually(t, 10*time.Second, "leader", n.IsLeader)
	bal := testutil.Ballast(t, mnt, 256<<10)
	value := strings.Repeat("x", 1000)
	proposed := 0
	for ; proposed < 5000; proposed++ {
		if _, err := n.Propose(ctxTimeout(t, 5*time.Second), []byte(value)); err != nil {
			t.Logf("proposal %d: %v", proposed, err)
			break
		}
	}
	if proposed == 5000 {
		t.Fatal("5 MB of proposals fit in 256 KiB")
	}
	testutil.Eventually(t, 5*time.Second, "the storage fence", func() bool { return errors.Is(n.Unfit(), ErrStorage) })
	t.Logf("unfit: %v", n.Unfit())
	if !strings.Contains(n.Unfit().Error(), mnt) {
		t.Errorf("Unfit() = %q: does not name %s", n.Unfit(), mnt)
	}
	if !n.FenceReasons()["storage"] {
		t.Errorf("FenceReasons = %v", n.FenceReasons())
	}
	// A one-node cluster's candidate votes for itself without asking the
	// transport, so the fence cannot keep it from winning: it wins, fails
	// its first write and steps down again (raft.go, dispatchLogs). The
	// three-node test in cmd/lockcluster (diskfull_test.go) checks that a
	// fenced node of a real cluster stands for no election.

	if err := os.Remove(bal); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the fence to come down and a leader", func() bool { return n.Unfit() == nil && n.IsLeader() })
	propose(t, n, "after")
	if got := f.Entries(); got[len(got)-1] != "after" {
		t.Fatalf("last entry %q", got[len(got)-1])
	}
}

// A WAL closed right after the append that sealed its segment, before the
// background rotation recorded the seal (wal.go, runRotate gives up once
// the WAL is closed), opens with its tail sealed; raft-wal alone then
// refuses every append, across restarts. The guard completes the rotation
// when it opens.
func TestDiskGuardOpensAWALClosedMidRotation(t *testing.T) {
	const seg = 32 << 10
	sealedSeen := 0
	for trial := range 20 {
		dir := t.TempDir()
		open := func() (*wal.WAL, error) { return wal.Open(dir, wal.WithSegmentSize(seg)) }
		w, err := open()
		if err != nil {
			t.Fatal(err)
		}
		var batch []*raft.Log
		for i := uint64(1); i <= 400; i++ { // 400 entries of 100 bytes fill a 32 KiB segment
			batch = append(batch, entry(i, 100))
		}
		if err := w.StoreLogs(batch); err != nil {
			t.Fatal(err)
		}
		w.Close() // races the rotation the append started

		if w, err := open(); err == nil { // what raft-wal alone does with it
			if err := w.StoreLogs([]*raft.Log{entry(401, 100)}); errors.Is(err, wal.ErrSealed) {
				sealedSeen++
			}
			w.Close()
		}
		g, err := newDiskGuard(dir, seg, open, hclog.NewNullLogger())
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		last, _ := g.LastIndex()
		if err := g.StoreLogs([]*raft.Log{entry(last+1, 100)}); err != nil {
			g.Close()
			t.Fatalf("trial %d: an append after reopening: %v", trial, err)
		}
		g.Close()
	}
	t.Logf("raft-wal alone refused appends after %d of 20 closes mid-rotation", sealedSeen)
}

// Config.WALSegmentSize caps the raft-wal segments a node preallocates
// (groups other than a cluster's first use 8 MiB): the log's segment
// files are that size, not raft-wal's 64 MiB.
func TestWALSegmentSize(t *testing.T) {
	dir := t.TempDir()
	n, err := New(Config{ID: "solo", DataDir: dir, BindAddr: "127.0.0.1:0", Bootstrap: []Peer{{ID: "solo"}},
		Logger: testLogger(t, "solo"), WALSegmentSize: 8 << 20, WALMetricLabels: map[string]string{"group": "3"}}, &listFSM{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Shutdown(context.Background())
	testutil.Eventually(t, 10*time.Second, "leadership", n.IsLeader)
	propose(t, n, "a", "b")
	segs, _ := filepath.Glob(filepath.Join(dir, "wal", "*.wal"))
	if len(segs) == 0 {
		t.Fatal("no raft-wal segment")
	}
	for _, s := range segs {
		fi, err := os.Stat(s)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != 8<<20 {
			t.Fatalf("segment %s is %d bytes, want %d", filepath.Base(s), fi.Size(), 8<<20)
		}
	}
}

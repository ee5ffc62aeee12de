package raftnode

// The disk guard: raft-wal on a disk that fills up, and frees up again.
//
// raft-wal v0.4.2 creates the next segment file in the background once the
// tail is full (wal.go, runRotate), preallocating it whole (fs/fs.go,
// fileutil.Preallocate). When that fails (ENOSPC) it logs "rotate error"
// and leaves its in-memory state with the old tail, sealed: every later
// append fails "segment is sealed", however much space is freed, until the
// WAL is opened again. Its metadata already lists the new segment (it is
// committed before the file is created), and the half-created file stays:
// a head truncation then recreates a file of the same name ("file exists")
// and leaves memory and metadata apart ("non-monotonic log entries").
// Opening the WAL again rebuilds its state from the metadata and the files,
// recovering the empty new segment as the tail.
//
// So the log is wrapped: a write that fails raises the storage fence
// (fence.go: the node serves no clients and stands for no election, and a
// leader whose own write fails steps down by itself: raft.go,
// dispatchLogs), later writes fail at once, and a goroutine waits for free
// space and opens the WAL again in this process. Reads go on throughout:
// raft reads its log from several goroutines and panics when an entry it
// has cannot be read (raft.go, processLogs), so a reopen holds them back
// for the few milliseconds it takes instead of failing them.
//
// When the metadata commit itself fails during a rotation, raft-wal's
// recovery finds the old tail sealed on disk but not in the metadata, and
// reopens it sealed: appends fail even after a restart. completeRotation
// finishes that rotation in the metadata before the WAL is opened again.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

const (
	// minSegmentSize is the smallest raft-wal segment a node uses; a disk
	// with room for fewer than segmentsInFree of them refuses to start.
	minSegmentSize = 1 << 20
	// segmentsInFree: at open, a segment is at most this fraction of the
	// free space, so that the next rotations, the snapshots and raft.db
	// have room too (a 64 MiB volume gets 15 MiB segments).
	segmentsInFree = 4
	// diskRetry paces the wait for free space; consecutive failures with
	// no successful write in between double it, up to diskRetryMax.
	diskRetry    = time.Second
	diskRetryMax = 30 * time.Second
	// diskReopenNeeds: the guard reopens the log once this many segments
	// fit in the free space (hysteresis: not on the first freed block).
	diskReopenNeeds = 2
	// diskStillFull is how often a node still waiting for space says so.
	diskStillFull = 30 * time.Second
	// probePattern names probeSpace's files in the log's directory
	// (raft-wal's Open ignores all but *.wal files).
	probePattern = ".space-probe-*"
)

// segmentSizeFor picks raft-wal's segment size for a log in dir: the
// default (64 MiB) when the free space holds segmentsInFree of them,
// otherwise a whole number of MiB that fits that many times, and an error
// below minSegmentSize. Unknown free space keeps the default.
func segmentSizeFor(dir string) (int, error) {
	free, _, ok := diskSpace(dir)
	if !ok {
		return wal.DefaultSegmentSize, nil
	}
	return segmentSizeFree(dir, free)
}

func segmentSizeFree(dir string, free uint64) (int, error) {
	size := free / segmentsInFree
	if size >= uint64(wal.DefaultSegmentSize) {
		return wal.DefaultSegmentSize, nil
	}
	size &^= minSegmentSize - 1
	if size < minSegmentSize {
		return 0, fmt.Errorf("raftnode: %s has %s free; a node needs at least %s there (raft-wal preallocates each log segment, and the log needs room for %d segments of at least %s)",
			dir, fmtBytes(free), fmtBytes(minSegmentSize*segmentsInFree), segmentsInFree, fmtBytes(minSegmentSize))
	}
	return int(size), nil
}

// storageError is why the log in Path does not take writes: the error of
// the write (Op) that failed, and the space left when it did.
type storageError struct {
	Path  string // the log's directory
	Op    string // "append" or "delete"
	Err   error
	Free  uint64 // bytes free, as statfs says (Known)
	Total uint64
	Known bool
	Need  uint64 // a new segment
	Probe error  // allocating a new segment's space, if that failed too
}

func (e *storageError) Error() string {
	space := ""
	if e.Known {
		space = fmt.Sprintf("; %s free of %s", fmtBytes(e.Free), fmtBytes(e.Total))
	}
	if e.Probe != nil {
		space += fmt.Sprintf(", and a new %s log segment cannot be allocated (%v)", fmtBytes(e.Need), unwrapPath(e.Probe))
	}
	return fmt.Sprintf("the raft log in %s cannot be written (%s: %v%s): this node serves no clients and stands for no election until the disk takes writes again; it retries by itself",
		e.Path, e.Op, e.Err, space)
}

// Is makes every *storageError match ErrStorage.
func (e *storageError) Is(target error) bool { return target == ErrStorage }

func (e *storageError) Unwrap() error { return e.Err }

// unwrapPath drops an *os.PathError's path (the probe's temporary file).
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// diskGuard is raft-wal's log, reopened in this process after a write
// fails once the disk has room again. It is a plain raft.LogStore and
// raft.MonotonicLogStore.
type diskGuard struct {
	dir     string
	segSize int
	open    func() (*wal.WAL, error) // the same options every time
	logger  hclog.Logger
	retry   time.Duration // diskRetry; tests shorten it

	mu  sync.RWMutex // read-held around every call into w; write-held to replace it
	w   *wal.WAL
	gen atomic.Uint64 // reopens so far

	fmu      sync.Mutex                   // orders failed's changes with the fence's
	failed   atomic.Pointer[storageError] // writes fail at once with it
	raise    func(error)                  // the storage fence (attach)
	lower    func()
	unproven atomic.Bool  // reopened, and no write has succeeded since
	streak   atomic.Int32 // failures in a row with no successful write in between
	stopping <-chan struct{}

	kick      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

var (
	_ raft.LogStore          = (*diskGuard)(nil)
	_ raft.MonotonicLogStore = (*diskGuard)(nil)
)

// newDiskGuard opens the log with open and starts the goroutine that
// brings it back after a failed write.
func newDiskGuard(dir string, segSize int, open func() (*wal.WAL, error), logger hclog.Logger) (*diskGuard, error) {
	// A WAL closed (or a process stopped) right after an append that
	// sealed a segment, before the background rotation recorded it, opens
	// sealed too (wal.go: runRotate gives up once the WAL is closed).
	if err := completeRotation(dir, segSize, logger); err != nil {
		return nil, err
	}
	w, err := open()
	if err != nil {
		return nil, err
	}
	g := &diskGuard{
		dir: dir, segSize: segSize, open: open, logger: logger, retry: diskRetry, w: w,
		kick: make(chan struct{}, 1), done: make(chan struct{}),
	}
	g.wg.Add(1)
	go g.run()
	return g, nil
}

// attach connects the guard to the node's storage fence, raising it at
// once if a write has failed already. Once stopping is closed (the node
// shuts down) a reopen that keeps failing stops holding reads back.
func (g *diskGuard) attach(raise func(error), lower func(), stopping <-chan struct{}) {
	g.fmu.Lock()
	defer g.fmu.Unlock()
	g.raise, g.lower, g.stopping = raise, lower, stopping
	if se := g.failed.Load(); se != nil {
		raise(se)
	}
}

// Failing returns why writes fail, or nil.
func (g *diskGuard) Failing() error {
	if se := g.failed.Load(); se != nil {
		return se
	}
	return nil
}

func (g *diskGuard) FirstIndex() (uint64, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.w.FirstIndex()
}

func (g *diskGuard) LastIndex() (uint64, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.w.LastIndex()
}

func (g *diskGuard) GetLog(index uint64, log *raft.Log) error {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.w.GetLog(index, log)
}

func (g *diskGuard) StoreLog(log *raft.Log) error { return g.StoreLogs([]*raft.Log{log}) }

func (g *diskGuard) StoreLogs(logs []*raft.Log) error {
	if se := g.failed.Load(); se != nil {
		return se
	}
	g.mu.RLock()
	gen := g.gen.Load()
	err := g.w.StoreLogs(logs)
	g.mu.RUnlock()
	if err != nil {
		return g.fail("append", gen, err)
	}
	if g.unproven.Load() {
		g.unproven.Store(false)
	}
	return nil
}

func (g *diskGuard) DeleteRange(min, max uint64) error {
	if se := g.failed.Load(); se != nil {
		return se
	}
	g.mu.RLock()
	gen := g.gen.Load()
	err := g.roomToTruncate(min, max)
	if err == nil {
		err = g.w.DeleteRange(min, max)
	}
	g.mu.RUnlock()
	if err != nil {
		return g.fail("delete", gen, err)
	}
	return nil
}

// roomToTruncate checks, before a deletion that reaches the last entry,
// that a new segment can be allocated. raft-wal starts one for it
// (wal.go, truncateTailLocked; truncateHeadLocked when nothing is left)
// after committing the truncation to its metadata: failing to create the
// file would leave the truncation in the metadata but not in memory, and
// raft believing it failed. After the next reopen the log would end
// before raft's last index, and raft's follower path would fail on the
// missing entries for good (raft.go, appendEntries: "failed to get log
// entry"). Deletions of older entries only (compaction) need no file.
func (g *diskGuard) roomToTruncate(min, max uint64) error {
	last, err := g.w.LastIndex()
	if err != nil || last == 0 || min > last || max < last {
		return err
	}
	return probeSpace(g.dir, int64(g.segSize))
}

// IsMonotonic: raft-wal is (wal.go, IsMonotonic).
func (g *diskGuard) IsMonotonic() bool { return true }

// fail records that a write on the log of generation gen failed with err:
// the first failure raises the fence, logs it and wakes the recovery.
func (g *diskGuard) fail(op string, gen uint64, err error) error {
	if errors.Is(err, wal.ErrClosed) {
		return err // shutting down
	}
	if se := g.failed.Load(); se != nil {
		return se
	}
	se := &storageError{Path: g.dir, Op: op, Err: err, Need: uint64(g.segSize)}
	se.Free, se.Total, se.Known = diskSpace(g.dir)
	se.Probe = probeSpace(g.dir, int64(g.segSize))

	g.fmu.Lock()
	defer g.fmu.Unlock()
	if g.gen.Load() != gen {
		return err // the log was opened again since this write began
	}
	if !g.failed.CompareAndSwap(nil, se) {
		return g.failed.Load()
	}
	if g.unproven.Load() {
		g.streak.Add(1)
	} else {
		g.streak.Store(0)
	}
	g.logger.Error("STORAGE FAILING: the raft log cannot be written; this node serves no clients and stands for no election until the disk takes writes again (it retries by itself)",
		"path", g.dir, "op", op, "error", err, "free", fmtBytes(se.Free), "total", fmtBytes(se.Total),
		"segment_size", fmtBytes(se.Need), "allocate", errString(unwrapPath(se.Probe)))
	if g.raise != nil {
		g.raise(se)
	}
	select {
	case g.kick <- struct{}{}:
	default:
	}
	return se
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// run brings the log back after each failure.
func (g *diskGuard) run() {
	defer g.wg.Done()
	for {
		select {
		case <-g.done:
			return
		case <-g.kick:
		}
		if se := g.failed.Load(); se != nil {
			g.recover(se)
		}
	}
}

// recover waits until the disk has room for diskReopenNeeds segments and a
// segment's space can be allocated, opens the log again and lowers the
// fence.
func (g *diskGuard) recover(se *storageError) {
	since := time.Now()
	every := min(g.retry<<min(g.streak.Load(), 8), diskRetryMax)
	need := uint64(diskReopenNeeds * g.segSize)
	t := time.NewTicker(every)
	defer t.Stop()
	lastSaid := since
	for {
		select {
		case <-g.done:
			return
		case <-t.C:
		}
		free, total, known := diskSpace(g.dir)
		room := !known || free >= need
		var probe error
		if room {
			probe = probeSpace(g.dir, int64(g.segSize))
			room = probe == nil
		}
		if !room {
			if time.Since(lastSaid) >= diskStillFull {
				lastSaid = time.Now()
				g.logger.Warn("the raft log still cannot be written: waiting for free space", "path", g.dir,
					"free", fmtBytes(free), "total", fmtBytes(total), "needed", fmtBytes(need),
					"allocate", errString(unwrapPath(probe)), "for", time.Since(since).Round(time.Second))
			}
			continue
		}
		if err := g.reopen(); err != nil {
			return // closed
		}
		g.fmu.Lock()
		g.unproven.Store(true)
		g.failed.Store(nil)
		if g.lower != nil {
			g.lower()
		}
		g.fmu.Unlock()
		g.logger.Warn("the raft log takes writes again: reopened it; this node follows the leader and stands for election again",
			"path", g.dir, "free", fmtBytes(free), "total", fmtBytes(total), "failed_for", time.Since(since).Round(time.Millisecond),
			"failure", se.Err)
		return
	}
}

// reopen closes the log and opens it again, holding reads back meanwhile.
// If raft-wal cannot open it (it could a moment ago), reads wait and it
// tries again every retry, until the guard closes or the node stops.
func (g *diskGuard) reopen() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.w.Close(); err != nil {
		g.logger.Warn("closing the raft log before reopening it", "path", g.dir, "error", err)
	}
	g.gen.Add(1)
	for {
		err := completeRotation(g.dir, g.segSize, g.logger)
		var w *wal.WAL
		if err == nil {
			w, err = g.open()
		}
		if err == nil {
			g.w = w
			return nil
		}
		g.logger.Error("reopening the raft log failed; raft's reads of the log wait until it opens", "path", g.dir, "error", err)
		g.fmu.Lock()
		stopping := g.stopping
		g.fmu.Unlock()
		select {
		case <-g.done:
			return err // reads get wal.ErrClosed from the closed log
		case <-stopping:
			return err
		case <-time.After(g.retry):
		}
	}
}

// Close stops the recovery and closes the log.
func (g *diskGuard) Close() error {
	g.closeOnce.Do(func() { close(g.done) })
	g.wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.w.Close()
}

// removeProbes removes what probeSpace left in dir when the process
// stopped in the middle (each holds a segment's worth of space).
func removeProbes(dir string) {
	probes, _ := filepath.Glob(filepath.Join(dir, probePattern))
	for _, p := range probes {
		os.Remove(p)
	}
}

// completeRotation finishes, in raft-wal's metadata, a rotation whose seal
// reached the tail segment's file but not the metadata (the metadata
// commit failed: wal.go, rotateSegmentLocked). raft-wal would reopen that
// tail sealed, and every append would fail "segment is sealed". It does
// what the rotation would have committed: the tail sealed at its last
// index, and a new empty tail after it, whose file wal.Open creates
// (RecoverTail finds none). The WAL in dir must be closed.
func completeRotation(dir string, segSize int, logger hclog.Logger) error {
	if _, err := os.Stat(filepath.Join(dir, metadb.FileName)); err != nil {
		return nil // no log yet
	}
	var db metadb.BoltMetaDB
	st, err := db.Load(dir)
	defer db.Close()
	if err != nil {
		return fmt.Errorf("reading raft-wal's metadata: %w", err)
	}
	n := len(st.Segments)
	if n == 0 || !st.Segments[n-1].SealTime.IsZero() {
		return nil
	}
	tail := st.Segments[n-1]
	sw, err := segment.NewFiler(dir, fs.New()).RecoverTail(tail)
	if err != nil {
		return nil // missing (wal.Open creates it) or unreadable (wal.Open says why)
	}
	sealed, indexStart, err := sw.Sealed()
	last := sw.LastIndex()
	sw.Close()
	if err != nil || !sealed {
		return nil
	}
	now := time.Now()
	tail.SealTime, tail.MaxIndex, tail.IndexStart = now, last, indexStart
	st.Segments[n-1] = tail
	next := types.SegmentInfo{
		ID: st.NextSegmentID, BaseIndex: last + 1, MinIndex: last + 1,
		SizeLimit: uint32(segSize), Codec: tail.Codec, CreateTime: now,
	}
	st.NextSegmentID++
	st.Segments = append(st.Segments, next)
	if err := db.CommitState(st); err != nil {
		return fmt.Errorf("completing raft-wal's rotation of segment %d: %w", tail.ID, err)
	}
	logger.Warn("completed a segment rotation that raft-wal had sealed on disk but not recorded",
		"path", dir, "sealed_segment", tail.ID, "last_index", last, "new_segment", next.ID)
	return nil
}

// fmtBytes writes n bytes for an operator, rounded down (free space is
// never overstated): 512 B, 212 KiB, 3.9 MiB, 1.5 GiB.
func fmtBytes(n uint64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%d KiB", n>>10)
	case n < 1<<30:
		return fmt.Sprintf("%d.%d MiB", n>>20, (n&(1<<20-1))*10>>20)
	default:
		return fmt.Sprintf("%d.%d GiB", n>>30, (n&(1<<30-1))*10>>30)
	}
}

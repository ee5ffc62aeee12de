package raftnode

// This file owns the log's own checksums: checkedLogs, the raft.LogStore
// wrapper that stores every entry with a CRC32C trailer and verifies it on
// every read, the marker file that says from which index every entry must
// carry one (data directories written before checksums existed), and
// verifyLog, the whole-log check run at start.
//
// Why: raft-wal v0.4.2 verifies no checksum when it reads an entry
// (segment/reader.go, Reader.GetLog returns the frame's bytes as they are)
// and checks only the last batch's CRC when it recovers the tail
// (segment/writer.go, recoverTail). A flipped byte in an entry is served
// to raft and the FSM as if it had been written so; raft-boltdb checks
// nothing either. walscan.go owns the other half: committed batches that
// raft-wal's recovery drops as a torn tail.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"go.etcd.io/bbolt"
)

// The trailer checkedLogs appends to every entry's Extensions:
//
//	original Extensions | crc32c u32 LE | "LCS1"
//
// The magic goes last so that a reader recognises the trailer from the end
// of the slice, whatever the Extensions held before (checkpoint entries
// carry their own payload there, checkpoint.go). The CRC covers the magic
// and every field of the original entry (logSum).
var logSumMagic = [4]byte{'L', 'C', 'S', '1'}

const logSumLen = 4 + len(logSumMagic)

// logSumTable is CRC32C (Castagnoli), hardware-accelerated on amd64 and
// arm64; raft-wal's frames use the same polynomial (segment/crc.go).
var logSumTable = crc32.MakeTable(crc32.Castagnoli)

// logSumsFile, in the data directory, records the first index from which
// every stored entry carries a checksum trailer. It is written once, when
// a data directory is first opened by a version that writes trailers;
// entries below it were written before and may lack one.
const logSumsFile = "LOG-CHECKSUMS"

// checkedLogs is a raft.LogStore that stores a copy of every entry with a
// checksum trailer (logSumMagic) and verifies and strips it on every read,
// so raft and the FSM see exactly the entry that was stored, or an error
// that matches ErrDamaged.
//
// It sits directly on the durable store (raft-wal or raft-boltdb), below
// raft's LogCache: the cache keeps the caller's *raft.Log, which this
// store never modifies, and serves recent entries without a read.
//
// GetLog also returns raft.ErrLogNotFound for an index below FirstIndex:
// raft-wal v0.4.2 serves such entries while they sit in the tail segment
// (state.go, state.getLog asks the tail writer first, and
// segment/writer.go, Writer.OffsetForFrame compares with the MinIndex the
// writer was created with, which a head truncation (wal.go,
// truncateHeadLocked) does not update).
type checkedLogs struct {
	inner raft.LogStore
	path  string // the store's file or directory, for reports
	since uint64 // entries at or above this index must carry a trailer

	onDamage atomic.Pointer[func(*storageDamage)]
}

var (
	_ raft.LogStore          = (*checkedLogs)(nil)
	_ raft.MonotonicLogStore = (*checkedLogs)(nil)
)

// newCheckedLogs wraps inner, the log store kept at path (raft-wal's
// directory or raft.db), in the data directory dataDir. The first time a
// data directory is opened it records there (logSumsFile, fsynced and
// atomically renamed) that every entry from inner's LastIndex+1 on carries
// a trailer; older entries are accepted without one. An unreadable record
// is returned as a *storageDamage.
//
// The limits: an old entry whose Extensions happen to end in the magic (a
// checkpoint's hash, 1 in 2^32) reads as damaged; a record that is lost
// (deleted by hand) is written again from the current LastIndex, so the
// entries before it are accepted without a trailer; and a version that
// writes no trailers must not be run on the directory again.
func newCheckedLogs(inner raft.LogStore, dataDir, path string) (*checkedLogs, error) {
	c := &checkedLogs{inner: inner, path: path}
	file := filepath.Join(dataDir, logSumsFile)
	since, err := readLogSumsFile(file)
	switch {
	case err == nil:
		c.since = since
		return c, nil
	case !errors.Is(err, os.ErrNotExist):
		var d *storageDamage
		if errors.As(err, &d) {
			return nil, d
		}
		return nil, fmt.Errorf("raftnode: %w", err)
	}
	last, err := inner.LastIndex()
	if err != nil {
		return nil, fmt.Errorf("raftnode: reading the log's last index: %w", err)
	}
	c.since = last + 1
	if err := writeFileDurably(file, encodeLogSumsFile(c.since)); err != nil {
		return nil, fmt.Errorf("raftnode: recording where the log's checksums start: %w", err)
	}
	return c, nil
}

// encodeLogSumsFile is logSumsFile's content: one line naming the index and
// a CRC32C of that line's first part, so that a damaged record is not
// taken for another index.
func encodeLogSumsFile(since uint64) []byte {
	line := "lockcluster log checksums from index " + strconv.FormatUint(since, 10)
	return fmt.Appendf(nil, "%s crc32c %08x\n", line, crc32.Checksum([]byte(line), logSumTable))
}

// readLogSumsFile returns the index recorded in file (an error matching
// os.ErrNotExist if there is none, a *storageDamage if it is damaged).
func readLogSumsFile(file string) (uint64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	damaged := &storageDamage{Store: "log", Path: file,
		Reason: fmt.Sprintf("the record of where the log's checksums start is unreadable: %q", b)}
	s := strings.TrimSuffix(string(b), "\n")
	i := strings.LastIndex(s, " crc32c ")
	if i < 0 {
		return 0, damaged
	}
	line := s[:i]
	sum, err := strconv.ParseUint(s[i+len(" crc32c "):], 16, 32)
	if err != nil || uint32(sum) != crc32.Checksum([]byte(line), logSumTable) {
		return 0, damaged
	}
	const prefix = "lockcluster log checksums from index "
	since, err := strconv.ParseUint(strings.TrimPrefix(line, prefix), 10, 64)
	if !strings.HasPrefix(line, prefix) || err != nil || since == 0 {
		return 0, damaged
	}
	return since, nil
}

// setOnDamage installs fn, called with every damage a GetLog finds (it may
// be called more than once, and concurrently). verifyLog does not call it:
// it returns what it finds.
func (c *checkedLogs) setOnDamage(fn func(*storageDamage)) {
	if fn == nil {
		c.onDamage.Store(nil)
		return
	}
	c.onDamage.Store(&fn)
}

// logSum is the CRC32C of l with Extensions ext (the original ones) and
// the trailer's magic: index, term, type, the lengths and bytes of Data and
// ext, and AppendedAt as Unix seconds and nanoseconds (what both stores
// keep of a time: raft-wal's codec uses time.MarshalBinary, codec.go,
// encoder.time; raft-boltdb's msgpack keeps seconds and nanoseconds too).
// h is scratch space for the fixed fields: a stack array would escape
// (crc32.Update's implementation is chosen at run time), so StoreLogs
// passes one for the whole batch.
func logSum(l *raft.Log, ext []byte, h *logSumHeader) uint32 {
	copy(h[:], logSumMagic[:])
	binary.LittleEndian.PutUint64(h[4:], l.Index)
	binary.LittleEndian.PutUint64(h[12:], l.Term)
	h[20] = byte(l.Type)
	binary.LittleEndian.PutUint64(h[21:], uint64(len(l.Data)))
	binary.LittleEndian.PutUint64(h[29:], uint64(len(ext)))
	binary.LittleEndian.PutUint64(h[37:], uint64(l.AppendedAt.Unix()))
	binary.LittleEndian.PutUint32(h[45:], uint32(l.AppendedAt.Nanosecond()))
	sum := crc32.Update(0, logSumTable, h[:])
	sum = crc32.Update(sum, logSumTable, l.Data)
	return crc32.Update(sum, logSumTable, ext)
}

// logSumHeader holds the fixed fields logSum covers: magic, index, term,
// type, the two lengths, and AppendedAt's seconds and nanoseconds.
type logSumHeader [4 + 8 + 8 + 1 + 8 + 8 + 8 + 4]byte

// StoreLog stores one entry (StoreLogs).
func (c *checkedLogs) StoreLog(l *raft.Log) error {
	return c.StoreLogs([]*raft.Log{l})
}

// StoreLogs stores copies of logs, each with its trailer; logs themselves
// are not modified (LogCache keeps them). Four allocations per call: the
// copies, the pointers to them, one buffer for every copy's Extensions,
// and logSum's scratch.
func (c *checkedLogs) StoreLogs(logs []*raft.Log) error {
	size := 0
	for _, l := range logs {
		size += len(l.Extensions) + logSumLen
	}
	buf := make([]byte, 0, size)
	h := new(logSumHeader)
	copies := make([]raft.Log, len(logs))
	ptrs := make([]*raft.Log, len(logs))
	for i, l := range logs {
		copies[i] = *l
		start := len(buf)
		buf = append(buf, l.Extensions...)
		buf = binary.LittleEndian.AppendUint32(buf, logSum(l, l.Extensions, h))
		buf = append(buf, logSumMagic[:]...)
		copies[i].Extensions = buf[start:len(buf):len(buf)]
		ptrs[i] = &copies[i]
	}
	return c.inner.StoreLogs(ptrs)
}

// GetLog reads the entry at index into log, verifies its trailer and
// strips it. It returns raft.ErrLogNotFound for an index outside
// [FirstIndex, LastIndex], and a *storageDamage (errors.Is ErrDamaged) for
// an entry that fails its checksum, lacks a trailer it must have, is
// stored under another index, or cannot be read although the log says it
// holds it; the onDamage callback, if set, hears of it first.
func (c *checkedLogs) GetLog(index uint64, log *raft.Log) error {
	err := c.get(index, log)
	if d, ok := err.(*storageDamage); ok {
		if fn := c.onDamage.Load(); fn != nil {
			(*fn)(d)
		}
	}
	return err
}

// get is GetLog without the callback.
func (c *checkedLogs) get(index uint64, log *raft.Log) error {
	err := c.inner.GetLog(index, log)
	for try := 0; err != nil && errors.Is(err, raft.ErrLogNotFound); try++ {
		// Not found is right outside the log's bounds. Inside them it is a
		// hole, unless a concurrent DeleteRange and StoreLogs replaced the
		// entry in between: read once more before calling it damage.
		in, berr := c.holds(index)
		if berr != nil {
			return berr
		}
		if !in {
			*log = raft.Log{}
			return raft.ErrLogNotFound
		}
		if try == 1 {
			break
		}
		err = c.inner.GetLog(index, log)
	}
	if err != nil {
		if closedStoreErr(err) {
			return err
		}
		*log = raft.Log{}
		return c.damage(index, fmt.Sprintf("the log holds index %d but reading it failed: %v", index, err))
	}
	if first, ferr := c.inner.FirstIndex(); ferr == nil && index < first {
		*log = raft.Log{} // deleted, still in raft-wal's tail segment
		return raft.ErrLogNotFound
	}
	if log.Index != index {
		got := log.Index
		*log = raft.Log{}
		return c.damage(index, fmt.Sprintf("the entry read for index %d says it is index %d", index, got))
	}
	ext := log.Extensions
	n := len(ext) - logSumLen
	if n < 0 || [4]byte(ext[len(ext)-4:]) != logSumMagic {
		if index >= c.since {
			*log = raft.Log{}
			return c.damage(index, fmt.Sprintf("the entry has no checksum trailer, and every entry from index %d must (%s)", c.since, logSumsFile))
		}
		return nil // written before checksums
	}
	orig := ext[:n:n]
	want := binary.LittleEndian.Uint32(ext[n:])
	if got := logSum(log, orig, new(logSumHeader)); got != want {
		*log = raft.Log{}
		return c.damage(index, fmt.Sprintf("checksum mismatch: the entry's trailer says %08x, its contents sum to %08x", want, got))
	}
	if n == 0 {
		orig = nil // no Extensions reads as nil, as from raft-wal (codec.go, decoder.bytes)
	}
	log.Extensions = orig
	return nil
}

// holds reports whether index lies within the log's bounds now.
func (c *checkedLogs) holds(index uint64) (bool, error) {
	first, err := c.inner.FirstIndex()
	if err != nil {
		return false, err
	}
	last, err := c.inner.LastIndex()
	if err != nil {
		return false, err
	}
	return last > 0 && first <= index && index <= last, nil
}

// closedStoreErr recognises the errors of a store that was closed (the
// node is shutting down), which say nothing about the data.
func closedStoreErr(err error) bool {
	return errors.Is(err, wal.ErrClosed) || errors.Is(err, bbolt.ErrDatabaseNotOpen)
}

// damage is the report of an untrustworthy entry at index.
func (c *checkedLogs) damage(index uint64, reason string) *storageDamage {
	return &storageDamage{Store: "log", Path: c.path, Index: index, Reason: reason}
}

// FirstIndex passes through.
func (c *checkedLogs) FirstIndex() (uint64, error) { return c.inner.FirstIndex() }

// LastIndex passes through.
func (c *checkedLogs) LastIndex() (uint64, error) { return c.inner.LastIndex() }

// DeleteRange passes through.
func (c *checkedLogs) DeleteRange(min, max uint64) error { return c.inner.DeleteRange(min, max) }

// IsMonotonic is true: raft-wal is monotonic itself (wal.go, IsMonotonic),
// and the bolt store is declared so on purpose (clamp.go, monotonicLogs).
// raft's LogCache passes it on (log_cache.go, LogCache.IsMonotonic).
func (c *checkedLogs) IsMonotonic() bool { return true }

// verifyLog reads every entry from FirstIndex to LastIndex through c and
// returns the first index that cannot be trusted: an entry that fails
// c's checks (checksum, trailer, stored under another index, missing),
// or whose term is lower than its predecessor's. It returns nil, nil for a
// sound log, and an error that is not a *storageDamage when the store
// cannot be read at all (closed).
func verifyLog(c *checkedLogs) (*storageDamage, error) {
	first, err := c.inner.FirstIndex()
	if err != nil {
		return nil, fmt.Errorf("raftnode: verifying the log: %w", err)
	}
	last, err := c.inner.LastIndex()
	if err != nil {
		return nil, fmt.Errorf("raftnode: verifying the log: %w", err)
	}
	if last == 0 {
		return nil, nil
	}
	if first == 0 {
		first = 1
	}
	var l raft.Log
	var prevTerm uint64
	for i := first; i <= last; i++ {
		if err := c.get(i, &l); err != nil {
			if d, ok := err.(*storageDamage); ok {
				return d, nil
			}
			if errors.Is(err, raft.ErrLogNotFound) {
				return c.damage(i, fmt.Sprintf("the log's bounds are %d..%d, but index %d is missing", first, last, i)), nil
			}
			return nil, fmt.Errorf("raftnode: verifying the log at index %d: %w", i, err)
		}
		if l.Term < prevTerm {
			return c.damage(i, fmt.Sprintf("the entry's term %d is lower than its predecessor's %d", l.Term, prevTerm)), nil
		}
		prevTerm = l.Term
	}
	return nil, nil
}

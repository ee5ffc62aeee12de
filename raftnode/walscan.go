package raftnode

// This file owns the scan of raft-wal's tail segment at start
// (scanWALTail): it tells a torn write, which raft-wal rightly drops, from
// a corruption after which raft-wal drops committed entries.
//
// raft-wal v0.4.2 recovers the tail segment by reading frames until the
// first header that does not decode or is zero (segment/writer.go,
// readThroughSegment: "we assume that previously committed data is not
// silently corrupted by the FS"), and keeps everything up to the last
// commit frame, checking only that last batch's CRC (recoverTail). One
// flipped byte in a frame header in the middle of the segment thus ends
// the log there: every later committed entry is gone, silently, and the
// node may be elected with the shortened log.
//
// The format (segment/format.go): a 32-byte file header (magic, version,
// base index, segment id, codec), then 8-byte-aligned frames, each an
// 8-byte header (type: 1 entry, 2 index, 3 commit; 3 reserved zero bytes;
// uint32 LE payload length, or for a commit frame the CRC) and a payload
// padded to 8 bytes. One Append (segment/writer.go, Writer.Append) writes
// entry frames, an index frame if it seals the segment, and one commit
// frame, then fsyncs once. The commit frame's CRC is CRC32C over every
// byte from the end of the previous commit frame (from offset 0, the file
// header included, for the first) to the commit frame itself.
//
// A torn write damages only the batch being written, and the remnants of
// an older torn batch that a shorter later batch did not overwrite lie
// after the end of the valid data with their start overwritten: neither
// holds a complete batch whose CRC verifies. So a complete, verifying
// batch after the point where recovery stops proves that committed data
// was dropped.
//
// The limit: a corruption inside the very last committed batch looks
// exactly like a torn write of that batch (as in etcd's WAL), and raft-wal
// drops that batch; nothing after it can tell. That loses at most one
// Append's entries, which this node acknowledged; the checkedLogs trailer
// cannot help either, since the entries are no longer in the log.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
	"go.etcd.io/bbolt"
)

// raft-wal v0.4.2's segment format (segment/format.go).
const (
	walFileHeaderLen  = 32
	walFrameHeaderLen = 8
	walFrameEntry     = 1 // segment.FrameEntry
	walFrameIndex     = 2 // segment.FrameIndex
	walFrameCommit    = 3 // segment.FrameCommit
)

// scanWALTail scans the tail segment of the raft-wal log in walDir, which
// raft-wal has opened (wal.Open) and whose LastIndex is lastIndex, for
// committed data that recovery dropped or that does not verify. It must
// run before anything is appended: an append overwrites the evidence, and
// after a DeleteRange the old tail is sealed and no longer scanned.
//
// It returns a *storageDamage (Store "log", Path the segment file) when
//   - a complete batch whose CRC verifies, with entries above lastIndex,
//     lies after the point where recovery stopped: Index is lastIndex+1,
//     the first committed entry lost;
//   - a batch that recovery kept fails its CRC (a damaged payload or frame
//     header that raft-wal's reads do not notice): Index is the batch's
//     first entry still in the log.
//
// It returns an error (not a *storageDamage) when it cannot read the
// files, or when its own replay of raft-wal's recovery disagrees with
// lastIndex (then it cannot vouch for anything).
func scanWALTail(walDir string, lastIndex uint64) (*storageDamage, error) {
	st, err := readWALMeta(walDir)
	if err != nil {
		return nil, err
	}
	// The tail is the unsealed segment with the highest base index; Open
	// allows only the last one to be unsealed (wal.go, Open: "unsealed
	// segment is not at tail").
	var tail *types.SegmentInfo
	for i := range st.Segments {
		si := &st.Segments[i]
		if si.SealTime.IsZero() && (tail == nil || si.BaseIndex > tail.BaseIndex) {
			tail = si
		}
	}
	if tail == nil {
		return nil, nil // no segment yet: an empty log
	}
	if tail.Codec != wal.CodecBinaryV1 {
		return nil, fmt.Errorf("raftnode: the tail segment of %s uses codec %d, the scan knows only raft-wal's binary codec", walDir, tail.Codec)
	}
	path := filepath.Join(walDir, segment.FileName(*tail))
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // Open creates a missing tail; nothing was in it
	}
	if err != nil {
		return nil, fmt.Errorf("raftnode: scanning the raft-wal tail: %w", err)
	}
	return scanSegment(data, *tail, path, lastIndex)
}

// readWALMeta reads raft-wal's metadata (metadb/metadb.go: the JSON of
// types.PersistentState under key "m" of bucket "wal-meta" in the bolt
// file wal-meta.db). The WAL holds the file open with bolt's exclusive
// lock (bbolt.Open with nil options waits for it forever), so this reads a
// copy, made in the data directory. Nothing writes the file between Open
// and the first append.
func readWALMeta(walDir string) (types.PersistentState, error) {
	var st types.PersistentState
	b, err := os.ReadFile(filepath.Join(walDir, metadb.FileName))
	if err != nil {
		return st, fmt.Errorf("raftnode: reading raft-wal's metadata: %w", err)
	}
	// The copy goes next to the log, not in the system's temporary
	// directory: a container built FROM scratch has none.
	stale, _ := filepath.Glob(filepath.Join(filepath.Dir(walDir), ".walmeta-*")) // left by a crash
	for _, d := range stale {
		os.RemoveAll(d)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(walDir), ".walmeta-")
	if err != nil {
		return st, fmt.Errorf("raftnode: %w", err)
	}
	defer os.RemoveAll(tmp)
	cp := filepath.Join(tmp, metadb.FileName)
	if err := os.WriteFile(cp, b, 0o600); err != nil {
		return st, fmt.Errorf("raftnode: %w", err)
	}
	db, err := bbolt.Open(cp, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return st, fmt.Errorf("raftnode: reading raft-wal's metadata: %w", err)
	}
	defer db.Close()
	err = db.View(func(tx *bbolt.Tx) error {
		bk := tx.Bucket([]byte(metadb.MetaBucket))
		if bk == nil {
			return nil
		}
		raw := bk.Get([]byte(metadb.MetaKey))
		if raw == nil {
			return nil // an empty log (metadb.go, Load)
		}
		return json.Unmarshal(raw, &st)
	})
	if err != nil {
		return st, fmt.Errorf("raftnode: reading raft-wal's metadata: %w", err)
	}
	return st, nil
}

// walBatch is a commit frame and the batch it closes.
type walBatch struct {
	start  int64  // first byte the CRC covers
	commit int64  // offset of the commit frame
	crc    uint32 // the commit frame's CRC
	before int    // entry frames in the segment before this batch
	after  int    // entry frames up to and including this batch
}

// walRecovery is what raft-wal's recovery keeps of a tail segment.
type walRecovery struct {
	end     int64      // offset after the last kept commit frame; 0 when nothing is kept
	entries int        // entry frames kept
	batches []walBatch // the kept batches, in order
}

// recoverWALTail replays raft-wal v0.4.2's recovery of a tail segment
// (segment/writer.go, readThroughSegment and Writer.recoverTail) on data.
func recoverWALTail(data []byte) walRecovery {
	var batches []walBatch
	entries := 0
	off := int64(walFileHeaderLen)
	for off+walFrameHeaderLen <= int64(len(data)) {
		h := data[off : off+walFrameHeaderLen]
		typ := h[0]
		// readFrameHeader: type 0 (zeros, or corrupt) and unknown types end
		// the read; the reserved bytes are not checked.
		if typ != walFrameEntry && typ != walFrameIndex && typ != walFrameCommit {
			break
		}
		v := binary.LittleEndian.Uint32(h[4:])
		switch typ {
		case walFrameEntry:
			entries++
		case walFrameCommit:
			b := walBatch{commit: off, crc: v, after: entries}
			if n := len(batches); n > 0 {
				b.start = batches[n-1].commit + walFrameHeaderLen
				b.before = batches[n-1].after
			}
			batches = append(batches, b)
			v = 0 // a commit frame has no payload
		}
		off += walFrameHeaderLen + int64(v) + int64(walPadLen(v))
	}
	if len(batches) == 0 {
		return walRecovery{}
	}
	final := batches[len(batches)-1]
	keep := len(batches)
	// Entries after the final commit: a partial append, so the final
	// commit was durable and recoverTail does not check its CRC. Otherwise
	// it checks the final batch's CRC and, if that fails, falls back to
	// the previous commit (or to an empty segment).
	if final.after == entries && crc32.Checksum(data[final.start:final.commit], logSumTable) != final.crc {
		keep--
	}
	if keep == 0 {
		return walRecovery{}
	}
	last := batches[keep-1]
	return walRecovery{end: last.commit + walFrameHeaderLen, entries: last.after, batches: batches[:keep]}
}

// walPadLen is segment/format.go's padLen: payloads are padded to 8 bytes.
func walPadLen(n uint32) uint32 {
	return (walFrameHeaderLen - n%walFrameHeaderLen) % walFrameHeaderLen
}

// scanSegment scans the tail segment data (info from the metadata, at
// path) of a log whose LastIndex is lastIndex; see scanWALTail.
func scanSegment(data []byte, info types.SegmentInfo, path string, lastIndex uint64) (*storageDamage, error) {
	rec := recoverWALTail(data)
	recoveredLast := info.BaseIndex + uint64(rec.entries) - 1 // BaseIndex-1 when empty
	if rec.entries > 0 && recoveredLast != lastIndex || rec.entries == 0 && lastIndex >= info.BaseIndex {
		return nil, fmt.Errorf("raftnode: scanning %s: the replay of raft-wal's recovery ends at index %d, raft-wal's LastIndex is %d; the scan cannot vouch for this log",
			path, recoveredLast, lastIndex)
	}
	// Every kept batch must verify: recovery checks only the last one, and
	// reads check none.
	for _, b := range rec.batches {
		if crc32.Checksum(data[b.start:b.commit], logSumTable) == b.crc {
			continue
		}
		first := info.BaseIndex + uint64(b.before)
		if b.after > b.before && info.BaseIndex+uint64(b.after)-1 < info.MinIndex {
			continue // all its entries were deleted (a head truncation)
		}
		first = max(first, info.MinIndex)
		return &storageDamage{Store: "log", Path: path, Index: first,
			Reason: fmt.Sprintf("the batch of entries %d..%d (file offsets %d..%d) fails its CRC; raft-wal serves it unchecked",
				info.BaseIndex+uint64(b.before), info.BaseIndex+uint64(b.after)-1, b.start, b.commit)}, nil
	}
	// Then no complete, verifying batch may follow the recovered end.
	lost := findCommittedBeyond(data, rec.end, recoveredLast)
	if lost.batches == 0 {
		return nil, nil
	}
	return &storageDamage{Store: "log", Path: path, Index: recoveredLast + 1,
		Reason: fmt.Sprintf("raft-wal's recovery ends the log at index %d (file offset %d), but %d complete batches whose CRC verifies follow, with committed entries up to index %d (the first at offset %d): raft-wal dropped them as a torn write",
			recoveredLast, rec.end, lost.batches, lost.last, lost.offset)}, nil
}

// walLost describes the verifying batches found after the recovered end.
type walLost struct {
	batches int
	offset  int64  // where the first one starts
	last    uint64 // the highest entry index in them
}

// findCommittedBeyond looks in data, after end (where recovery stopped),
// for complete batches whose CRC verifies and whose entries lie above
// recoveredLast. A batch starts right after a commit-frame-shaped header
// (or at offset 0, the file header included, when nothing was recovered):
// every 8-aligned offset is tried, since a damaged length can misplace
// every later frame boundary for a reader but not the frames themselves.
func findCommittedBeyond(data []byte, end int64, recoveredLast uint64) walLost {
	var lost walLost
	found := func(start int64, spans [][2]int64) {
		var l raft.Log
		codec := wal.BinaryCodec{}
		var lo, hi uint64
		for _, s := range spans {
			if codec.Decode(data[s[0]:s[1]], &l) != nil {
				return
			}
			if lo == 0 {
				lo = l.Index
			}
			hi = l.Index
		}
		if lo <= recoveredLast {
			return // not beyond what the log holds: no evidence of loss
		}
		if lost.batches == 0 {
			lost.offset = start
		}
		lost.batches++
		lost.last = max(lost.last, hi)
	}
	if end == 0 && len(data) >= walFileHeaderLen {
		if _, spans, ok := walBatchAt(data, 0, walFileHeaderLen); ok {
			found(0, spans)
		}
	}
	o := max(end-walFrameHeaderLen, walFileHeaderLen)
	for ; o+walFrameHeaderLen <= int64(len(data)); o += walFrameHeaderLen {
		if data[o] != walFrameCommit || data[o+1]|data[o+2]|data[o+3] != 0 {
			continue
		}
		start := o + walFrameHeaderLen
		if commit, spans, ok := walBatchAt(data, start, start); ok {
			found(start, spans)
			o = commit - walFrameHeaderLen // the next try is at commit
		}
	}
	return lost
}

// walBatchAt reads a batch whose CRC starts at start and whose frames
// start at frames: well-formed entry or index frames (reserved bytes zero,
// length at most segment.MaxEntrySize, within data), at least one entry,
// then a commit frame whose CRC over data[start:commit] verifies. It
// returns the commit frame's offset and the entries' payload spans.
func walBatchAt(data []byte, start, frames int64) (commit int64, spans [][2]int64, ok bool) {
	p := frames
	for p+walFrameHeaderLen <= int64(len(data)) {
		h := data[p : p+walFrameHeaderLen]
		if h[1]|h[2]|h[3] != 0 {
			return 0, nil, false
		}
		v := binary.LittleEndian.Uint32(h[4:])
		switch h[0] {
		case walFrameEntry, walFrameIndex:
			if v > segment.MaxEntrySize {
				return 0, nil, false
			}
			next := p + walFrameHeaderLen + int64(v) + int64(walPadLen(v))
			if next > int64(len(data)) {
				return 0, nil, false
			}
			if h[0] == walFrameEntry {
				spans = append(spans, [2]int64{p + walFrameHeaderLen, p + walFrameHeaderLen + int64(v)})
			}
			p = next
		case walFrameCommit:
			if len(spans) == 0 || crc32.Checksum(data[start:p], logSumTable) != v {
				return 0, nil, false
			}
			return p, spans, true
		default:
			return 0, nil, false
		}
	}
	return 0, nil, false
}

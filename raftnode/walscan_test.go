package raftnode

// This file owns the tests of scanWALTail (walscan.go) and of what
// raft-wal v0.4.2 itself does with damaged files: they write real raft-wal
// files through checkedLogs, damage them the way a disk does (one flipped
// byte, a torn last write), reopen them and check what raft-wal,
// scanWALTail and verifyLog make of them.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
)

// scan runs scanWALTail on the open log.
func (l *lcWAL) scan(t testing.TB) *storageDamage {
	t.Helper()
	last, err := l.w.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	d, err := scanWALTail(l.walDir, last)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// lcFrame is a frame of a segment file, found by walking it from the
// file header (the test's own reading of segment/format.go).
type lcFrame struct {
	typ    byte
	offset int64 // of the header
	length uint32
}

// lcSegments returns the segment files of walDir, oldest first (raft-wal
// names them by zero-padded base index and id: segment/filer.go).
func lcSegments(t testing.TB, walDir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(walDir, "*.wal"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no segment files in %s: %v", walDir, err)
	}
	slices.Sort(files)
	return files
}

// lcFrames walks the frames of a segment file until a zero header.
func lcFrames(t testing.TB, path string) []lcFrame {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var frames []lcFrame
	for off := int64(32); off+8 <= int64(len(data)) && data[off] != 0; {
		f := lcFrame{typ: data[off], offset: off}
		if f.typ != 3 {
			f.length = binary.LittleEndian.Uint32(data[off+4:])
		}
		frames = append(frames, f)
		off += 8 + int64(f.length+(8-f.length%8)%8)
	}
	return frames
}

// lcBatch returns the frames of batch b (0-based) of a segment: its entry
// frames, then its commit frame (and the index frame, if any, before it).
func lcBatch(t testing.TB, frames []lcFrame, b int) []lcFrame {
	t.Helper()
	start := 0
	for i, f := range frames {
		if f.typ != 3 {
			continue
		}
		if b == 0 {
			return frames[start : i+1]
		}
		b--
		start = i + 1
	}
	t.Fatalf("no batch %d", b)
	return nil
}

// lcFlip XORs the byte at offset of path with 0x40.
func lcFlip(t testing.TB, path string, offset int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], offset); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b[:], offset); err != nil {
		t.Fatal(err)
	}
}

// lcZero writes n zero bytes at offset of path.
func lcZero(t testing.TB, path string, offset, n int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, n), offset); err != nil {
		t.Fatal(err)
	}
}

// lcLog writes lcBatches batches into one segment (raft-wal's default
// size), closes it and returns the data directory and the segment file.
func lcLog(t *testing.T) (dataDir, seg string) {
	t.Helper()
	dataDir = t.TempDir()
	l := lcOpen(t, dataDir, 0)
	l.write(t, lcBatches)
	l.close(t)
	segs := lcSegments(t, l.walDir)
	if len(segs) != 1 {
		t.Fatalf("want one segment, have %v", segs)
	}
	return dataDir, segs[0]
}

// TestRaftWALAloneDropsEntriesAfterAFlippedFrameHeader pins raft-wal
// v0.4.2's behaviour that scanWALTail exists for: one flipped byte in a
// frame header in the middle of the tail segment, and Open succeeds with
// the log ending just before that frame. If this test fails, upstream
// changed its recovery: re-read segment/writer.go (readThroughSegment,
// recoverTail) and walscan.go.
func TestRaftWALAloneDropsEntriesAfterAFlippedFrameHeader(t *testing.T) {
	dataDir, seg := lcLog(t)
	frames := lcFrames(t, seg)
	lcFlip(t, seg, lcBatch(t, frames, 20)[0].offset) // the type byte of batch 20's first entry frame

	w, err := wal.Open(filepath.Join(dataDir, "wal"), wal.WithLogger(hclog.NewNullLogger()))
	if err != nil {
		t.Fatalf("raft-wal refused the damaged log (upstream now notices?): %v", err)
	}
	defer w.Close()
	last, _ := w.LastIndex()
	if want := uint64(20 * lcPerBatch); last != want {
		t.Fatalf("raft-wal's LastIndex is %d after the flip, want %d (of %d written): upstream recovery changed", last, want, lcBatches*lcPerBatch)
	}
	t.Logf("raft-wal v0.4.2 opened the log without an error and with %d of %d committed entries", last, lcBatches*lcPerBatch)
}

// TestScanFindsEntriesDroppedAfterAFlippedFrameHeader: case (a), a flipped
// frame header in the middle of the tail segment.
func TestScanFindsEntriesDroppedAfterAFlippedFrameHeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   func(f lcFrame) int64
	}{
		{"type", func(f lcFrame) int64 { return f.offset }},                // unknown type: recovery stops there
		{"length", func(f lcFrame) int64 { return f.offset + 6 }},          // a length 4 MiB too long: recovery reads on elsewhere
		{"commit type", func(f lcFrame) int64 { return f.offset }},         // the batch's commit frame
		{"commit crc", func(f lcFrame) int64 { return f.offset + 4 }},      // recovery walks on; the batch fails its CRC
		{"reserved byte", func(f lcFrame) int64 { return f.offset + 2 }},   // raft-wal ignores it; the batch fails its CRC
		{"next batch type", func(f lcFrame) int64 { return f.offset + 0 }}, // the first frame of the next batch
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir, seg := lcLog(t)
			frames := lcFrames(t, seg)
			batch := lcBatch(t, frames, 20)
			f := batch[3]
			switch tc.name {
			case "commit type", "commit crc":
				f = batch[len(batch)-1]
			case "next batch type":
				f = lcBatch(t, frames, 21)[0]
			}
			lcFlip(t, seg, tc.at(f))

			l := lcOpen(t, dataDir, 0)
			d := l.scan(t)
			// The first index that cannot be trusted is batch 20's first:
			// either recovery ended the log before it, or the batch is
			// kept but fails its CRC.
			want := uint64(20*lcPerBatch + 1)
			if tc.name == "next batch type" {
				want = 21*lcPerBatch + 1
			}
			wantDamage(t, d, want, seg)
			t.Logf("raft-wal's LastIndex: %d of %d", l.last(t), lcBatches*lcPerBatch)
		})
	}
}

// TestScanFindsAFlippedPayloadByteInTheTail: case (b). raft-wal keeps the
// batch (only the last batch's CRC is checked at recovery) and serves the
// damaged entry; the scan reports the batch, verifyLog the entry.
func TestScanFindsAFlippedPayloadByteInTheTail(t *testing.T) {
	dataDir, seg := lcLog(t)
	entry := lcBatch(t, lcFrames(t, seg), 20)[5] // index 20*16+6
	lcFlip(t, seg, entry.offset+8+40)            // inside Data

	l := lcOpen(t, dataDir, 0)
	if got, want := l.last(t), uint64(lcBatches*lcPerBatch); got != want {
		t.Fatalf("LastIndex %d, want %d", got, want)
	}
	var raw raft.Log
	if err := l.w.GetLog(20*lcPerBatch+6, &raw); err != nil {
		t.Fatalf("raft-wal's GetLog: %v", err)
	}
	t.Logf("raft-wal alone serves the damaged entry without an error: %q…", raw.Data[:48])
	wantDamage(t, l.scan(t), 20*lcPerBatch+1, seg)
	wantDamage(t, l.verify(t), 20*lcPerBatch+6, l.walDir)
}

// TestVerifyFindsAFlippedByteInASealedSegment: case (c). Sealed segments
// are read through their index, never walked; scanWALTail does not look
// at them and the entries' trailers are what catches the damage.
func TestVerifyFindsAFlippedByteInASealedSegment(t *testing.T) {
	const segSize = 32 << 10
	write := func(t *testing.T) (string, []string) {
		dataDir := t.TempDir()
		l := lcOpen(t, dataDir, segSize)
		l.write(t, lcBatches)
		l.write(t, 1) // waits for the last rotation, so Close does not race it
		l.close(t)
		segs := lcSegments(t, l.walDir)
		if len(segs) < 5 {
			t.Fatalf("want several segments, have %d", len(segs))
		}
		return dataDir, segs
	}
	t.Run("payload", func(t *testing.T) {
		dataDir, segs := write(t)
		sealed := segs[2]
		frames := lcFrames(t, sealed)
		entry := frames[7]
		lcFlip(t, sealed, entry.offset+8+40)
		l := lcOpen(t, dataDir, segSize)
		index := lcBaseIndex(t, sealed) + 7

		var raw raft.Log
		if err := l.w.GetLog(index, &raw); err != nil {
			t.Fatalf("raft-wal's GetLog: %v", err)
		}
		t.Logf("raft-wal alone serves the damaged entry %d without an error", index)
		wantNoDamage(t, "scanWALTail", l.scan(t))
		wantDamage(t, l.verify(t), index, l.walDir)

		var got raft.Log
		err := l.c.GetLog(index, &got)
		if !errors.Is(err, ErrDamaged) {
			t.Fatalf("GetLog(%d) = %v, want ErrDamaged", index, err)
		}
	})
	t.Run("frame type", func(t *testing.T) {
		dataDir, segs := write(t)
		sealed := segs[2]
		entry := lcFrames(t, sealed)[7]
		lcFlip(t, sealed, entry.offset)
		l := lcOpen(t, dataDir, segSize)
		index := lcBaseIndex(t, sealed) + 7

		var raw raft.Log
		err := l.w.GetLog(index, &raw)
		t.Logf("raft-wal alone: GetLog(%d) = %v (ErrCorrupt: %v)", index, err, errors.Is(err, wal.ErrCorrupt))
		wantDamage(t, l.verify(t), index, l.walDir)
	})
	t.Run("frame length", func(t *testing.T) {
		dataDir, segs := write(t)
		sealed := segs[2]
		entry := lcFrames(t, sealed)[7]
		lcFlip(t, sealed, entry.offset+4) // the length's low byte: 64 more or fewer bytes
		l := lcOpen(t, dataDir, segSize)
		index := lcBaseIndex(t, sealed) + 7

		var raw raft.Log
		err := l.w.GetLog(index, &raw)
		t.Logf("raft-wal alone: GetLog(%d) = %v; Data %d bytes, Extensions %d bytes", index, err, len(raw.Data), len(raw.Extensions))
		wantDamage(t, l.verify(t), index, l.walDir)
	})
}

// lcBaseIndex parses a segment file's base index from its name.
func lcBaseIndex(t testing.TB, path string) uint64 {
	t.Helper()
	var base, id uint64
	if _, err := fmt.Sscanf(filepath.Base(path), "%020d-%016x.wal", &base, &id); err != nil {
		t.Fatal(err)
	}
	return base
}

// TestScanTakesDamageInTheLastBatchForATornWrite: case (d), the documented
// limit. A flipped byte in the last committed batch is what a torn write
// of that batch looks like: raft-wal drops the batch and the scan cannot
// tell.
func TestScanTakesDamageInTheLastBatchForATornWrite(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame int   // in the last batch; -1: its commit frame
		delta int64 // from the frame's header
	}{
		{"payload", 3, 8 + 40},
		{"frame type", 3, 0},
		{"commit crc", -1, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir, seg := lcLog(t)
			batch := lcBatch(t, lcFrames(t, seg), lcBatches-1)
			f := batch[len(batch)-1]
			if tc.frame >= 0 {
				f = batch[tc.frame]
			}
			lcFlip(t, seg, f.offset+tc.delta)
			l := lcOpen(t, dataDir, 0)
			if got, want := l.last(t), uint64((lcBatches-1)*lcPerBatch); got != want {
				t.Fatalf("LastIndex %d, want %d: raft-wal should drop the last batch", got, want)
			}
			wantNoDamage(t, "scanWALTail", l.scan(t))
			wantNoDamage(t, "verifyLog", l.verify(t))
		})
	}
}

// TestScanAcceptsCleanLogsAndTornWrites: no damage is reported for a log
// reopened as it was written, in one segment or several, nor after a torn
// last write (truncated, zeroed, a zeroed sector inside it), nor once a
// shorter batch was written over a torn one, leaving its remnants behind.
func TestScanAcceptsCleanLogsAndTornWrites(t *testing.T) {
	t.Run("clean", func(t *testing.T) {
		dataDir, _ := lcLog(t)
		l := lcOpen(t, dataDir, 0)
		if got, want := l.last(t), uint64(lcBatches*lcPerBatch); got != want {
			t.Fatalf("LastIndex %d, want %d", got, want)
		}
		wantNoDamage(t, "scanWALTail", l.scan(t))
		wantNoDamage(t, "verifyLog", l.verify(t))
	})
	t.Run("clean, several segments", func(t *testing.T) {
		dataDir := t.TempDir()
		l := lcOpen(t, dataDir, 32<<10)
		l.write(t, lcBatches)
		l.write(t, 1)
		l.close(t)
		l = lcOpen(t, dataDir, 32<<10)
		if got, want := l.last(t), uint64((lcBatches+1)*lcPerBatch); got != want {
			t.Fatalf("LastIndex %d, want %d", got, want)
		}
		wantNoDamage(t, "scanWALTail", l.scan(t))
		wantNoDamage(t, "verifyLog", l.verify(t))
	})
	t.Run("empty", func(t *testing.T) {
		l := lcOpen(t, t.TempDir(), 0)
		wantNoDamage(t, "scanWALTail", l.scan(t))
		wantNoDamage(t, "verifyLog", l.verify(t))
	})
	torn := func(t *testing.T, tear func(seg string, batch []lcFrame, prevCommit lcFrame)) *lcWAL {
		dataDir, seg := lcLog(t)
		frames := lcFrames(t, seg)
		prev := lcBatch(t, frames, lcBatches-2)
		tear(seg, lcBatch(t, frames, lcBatches-1), prev[len(prev)-1])
		l := lcOpen(t, dataDir, 0)
		if got, want := l.last(t), uint64((lcBatches-1)*lcPerBatch); got != want {
			t.Fatalf("LastIndex %d, want %d: the torn batch should be dropped", got, want)
		}
		wantNoDamage(t, "scanWALTail", l.scan(t))
		wantNoDamage(t, "verifyLog", l.verify(t))
		return l
	}
	t.Run("truncated", func(t *testing.T) {
		torn(t, func(seg string, batch []lcFrame, _ lcFrame) {
			if err := os.Truncate(seg, batch[6].offset+100); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("zeroed", func(t *testing.T) {
		torn(t, func(seg string, batch []lcFrame, prev lcFrame) {
			end := batch[len(batch)-1].offset + 8
			lcZero(t, seg, prev.offset+8, end-prev.offset-8)
		})
	})
	t.Run("zeroed sector, commit written", func(t *testing.T) {
		torn(t, func(seg string, batch []lcFrame, _ lcFrame) {
			lcZero(t, seg, (batch[5].offset+511)/512*512, 512)
		})
	})
	t.Run("torn, then a shorter batch over it", func(t *testing.T) {
		l := torn(t, func(seg string, batch []lcFrame, _ lcFrame) {
			lcZero(t, seg, batch[0].offset, 8) // the first sector never made it
		})
		if err := l.c.StoreLogs(lcEntries(l.last(t)+1, 4, 2)); err != nil {
			t.Fatal(err)
		}
		l.close(t)
		l = lcOpen(t, l.dataDir, 0)
		if got, want := l.last(t), uint64((lcBatches-1)*lcPerBatch+4); got != want {
			t.Fatalf("LastIndex %d, want %d", got, want)
		}
		wantNoDamage(t, "scanWALTail", l.scan(t))
		wantNoDamage(t, "verifyLog", l.verify(t))
	})
}

// TestDeleteSuffixAfterScanFoundDamage: what a repair that truncates the
// log at the damage meets in raft-wal. DeleteRange of a suffix seals the
// damaged tail (wal.go, truncateTailLocked: ForceSeal writes an index frame
// and a commit frame at the recovered end) and starts a new segment: it
// works, appends go on, and the next scan no longer sees the evidence. The
// damage must be recorded (repair.go, DAMAGED) before anything is written.
func TestDeleteSuffixAfterScanFoundDamage(t *testing.T) {
	dataDir, seg := lcLog(t)
	lcFlip(t, seg, lcBatch(t, lcFrames(t, seg), 20)[0].offset)
	l := lcOpen(t, dataDir, 0)
	wantDamage(t, l.scan(t), 20*lcPerBatch+1, seg)

	if err := l.c.DeleteRange(10*lcPerBatch+1, l.last(t)); err != nil {
		t.Fatalf("DeleteRange of a suffix: %v", err)
	}
	if got, want := l.last(t), uint64(10*lcPerBatch); got != want {
		t.Fatalf("LastIndex after DeleteRange: %d, want %d", got, want)
	}
	if err := l.c.StoreLogs(lcEntries(10*lcPerBatch+1, lcPerBatch, 2)); err != nil {
		t.Fatalf("append after DeleteRange: %v", err)
	}
	l.close(t)
	l = lcOpen(t, dataDir, 0)
	if got, want := l.last(t), uint64(11*lcPerBatch); got != want {
		t.Fatalf("LastIndex after reopening: %d, want %d", got, want)
	}
	wantNoDamage(t, "scanWALTail after the truncation", l.scan(t))
	wantNoDamage(t, "verifyLog", l.verify(t))
	t.Logf("segments now: %v", lcSegments(t, l.walDir))
}

// TestGetLogBelowFirstIndex: raft-wal v0.4.2 serves entries below its
// FirstIndex while they are in the tail segment (state.go, getLog asks the
// tail first; the writer's MinIndex is not updated by a head truncation);
// checkedLogs answers raft.ErrLogNotFound, as raft expects.
func TestGetLogBelowFirstIndex(t *testing.T) {
	l := lcOpen(t, t.TempDir(), 0)
	l.write(t, 4) // 1..64, all in the tail segment
	if err := l.c.DeleteRange(1, 40); err != nil {
		t.Fatal(err)
	}
	if first, _ := l.c.FirstIndex(); first != 41 {
		t.Fatalf("FirstIndex %d, want 41", first)
	}
	var raw raft.Log
	if err := l.w.GetLog(10, &raw); err != nil || raw.Index != 10 {
		t.Fatalf("raft-wal's GetLog(10) below FirstIndex = %v, index %d; upstream fixed it?", err, raw.Index)
	}
	for _, i := range []uint64{1, 10, 40, 65, 1000} {
		var got raft.Log
		if err := l.c.GetLog(i, &got); err != raft.ErrLogNotFound {
			t.Fatalf("GetLog(%d) = %v, want raft.ErrLogNotFound", i, err)
		}
	}
	var got raft.Log
	if err := l.c.GetLog(41, &got); err != nil || got.Index != 41 {
		t.Fatalf("GetLog(41) = %v, index %d", err, got.Index)
	}
}

// TestScanReportsDamageAtStartOfASegment: a flipped type byte in the very
// first frame leaves raft-wal with an empty tail; the scan sees every
// batch after it.
func TestScanReportsDamageAtStartOfASegment(t *testing.T) {
	dataDir, seg := lcLog(t)
	lcFlip(t, seg, lcFrames(t, seg)[0].offset)
	l := lcOpen(t, dataDir, 0)
	if got := l.last(t); got != 0 {
		t.Fatalf("LastIndex %d, want 0", got)
	}
	d := l.scan(t)
	wantDamage(t, d, 1, seg)
	if !strings.Contains(d.Reason, fmt.Sprintf("up to index %d", lcBatches*lcPerBatch)) {
		t.Fatalf("the reason should name the last committed index %d: %s", lcBatches*lcPerBatch, d.Reason)
	}
}

// BenchmarkScanWALTail scans a tail segment of 100,000 entries of ~200
// bytes (one 64 MiB segment file, raft-wal's default).
func BenchmarkScanWALTail(b *testing.B) {
	l := lcBenchLog(b)
	last := l.last(b)
	for b.Loop() {
		if d, err := scanWALTail(l.walDir, last); d != nil || err != nil {
			b.Fatal(d, err)
		}
	}
}

// TestScanIgnoresDamageBelowFirstIndex: a batch that fails its CRC is
// reported from its first entry still in the log (raft-wal's metadata
// keeps the tail's MinIndex after a head truncation), and not at all once
// all its entries are deleted.
func TestScanIgnoresDamageBelowFirstIndex(t *testing.T) {
	dataDir, seg := lcLog(t)
	frames := lcFrames(t, seg)
	lcFlip(t, seg, lcBatch(t, frames, 2)[3].offset+2)  // a reserved byte in entries 33..48
	lcFlip(t, seg, lcBatch(t, frames, 10)[3].offset+2) // and in entries 161..176
	l := lcOpen(t, dataDir, 0)
	wantDamage(t, l.scan(t), 33, seg)
	if err := l.c.DeleteRange(1, 40); err != nil {
		t.Fatal(err)
	}
	wantDamage(t, l.scan(t), 41, seg)
	if err := l.c.DeleteRange(41, 100); err != nil {
		t.Fatal(err)
	}
	wantDamage(t, l.scan(t), 161, seg)
}

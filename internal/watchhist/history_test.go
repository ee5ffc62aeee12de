package watchhist

import (
	"testing"

	"github.com/lockcluster/lockcluster/fsm"
)

func changesNamed(names ...string) []fsm.Change {
	out := make([]fsm.Change, len(names))
	for i, n := range names {
		out[i] = fsm.Change{Kind: fsm.ChangeGranted, Namespace: "ns", Names: []string{n}}
	}
	return out
}

func batchIndices(bs []Batch) []uint64 {
	var out []uint64
	for _, b := range bs {
		out = append(out, b.Index)
	}
	return out
}

// The history keeps the newest entries' changes up to its bound, knows the
// oldest index a watch can resume from, moves its applied index with
// entries that changed nothing, and starts over at a restored snapshot.
func TestWatchHistoryBoundsAndResumes(t *testing.T) {
	h := New(5)
	h.Append(1, 100, changesNamed("a", "b"))
	h.Append(2, 200, nil) // no changes: applied moves
	h.Append(3, 300, changesNamed("c", "d"))
	if h.Oldest() != 0 || h.Applied() != 3 || h.Len() != 4 {
		t.Fatalf("oldest %d applied %d len %d, want 0, 3, 4", h.Oldest(), h.Applied(), h.Len())
	}
	out, upTo, _, _, compacted := h.Next(0, 100)
	if compacted || len(out) != 2 || upTo != 3 || out[0].Time != 100 || out[1].Changes[1].Names[0] != "d" {
		t.Fatalf("next(0): %v up to %d compacted %v", batchIndices(out), upTo, compacted)
	}
	// A round of at most 2 changes: one batch, and the cursor only to it.
	out, upTo, _, _, _ = h.Next(0, 2)
	if len(out) != 1 || out[0].Index != 1 || upTo != 1 {
		t.Fatalf("next(0, 2): %v up to %d, want [1] up to 1", batchIndices(out), upTo)
	}
	// Past the bound the oldest entry's changes go: index 1 is the oldest
	// a watch may resume from (every change after it is held).
	h.Append(4, 400, changesNamed("e", "f"))
	if h.Oldest() != 1 || h.Len() != 4 {
		t.Fatalf("oldest %d len %d, want 1, 4", h.Oldest(), h.Len())
	}
	if _, _, _, oldest, compacted := h.Next(0, 100); !compacted || oldest != 1 {
		t.Fatalf("next(0) after the drop: compacted %v oldest %d, want compacted at 1", compacted, oldest)
	}
	out, upTo, wake, _, _ := h.Next(2, 100)
	if len(out) != 2 || out[0].Index != 3 || upTo != 4 {
		t.Fatalf("next(2): %v up to %d", batchIndices(out), upTo)
	}
	// A cursor past the applied index stays where it is.
	if _, upTo, _, _, _ := h.Next(9, 100); upTo != 9 {
		t.Fatalf("next(9) moved the cursor to %d", upTo)
	}
	// One entry larger than the bound is kept whole, alone.
	h.Append(5, 500, changesNamed("1", "2", "3", "4", "5", "6", "7"))
	select {
	case <-wake:
	default:
		t.Fatal("an append did not wake the waiting watch")
	}
	if h.Oldest() != 4 || h.Len() != 7 {
		t.Fatalf("oldest %d len %d after a large entry, want 4, 7", h.Oldest(), h.Len())
	}
	// An index at or below the applied one is ignored.
	h.Append(5, 0, changesNamed("x"))
	if h.Len() != 7 || h.Applied() != 5 {
		t.Fatalf("a repeated index changed the history: len %d applied %d", h.Len(), h.Applied())
	}
	// A snapshot installed at 40: nothing before it can be resumed from.
	h.Restored(40)
	if h.Oldest() != 40 || h.Applied() != 40 || h.Len() != 0 {
		t.Fatalf("after the restore: oldest %d applied %d len %d, want 40, 40, 0", h.Oldest(), h.Applied(), h.Len())
	}
	if _, _, _, oldest, compacted := h.Next(5, 100); !compacted || oldest != 40 {
		t.Fatalf("a cursor before the restored snapshot: compacted %v at %d", compacted, oldest)
	}
	h.Append(41, 0, changesNamed("g"))
	if out, upTo, _, _, compacted := h.Next(40, 100); compacted || len(out) != 1 || upTo != 41 {
		t.Fatalf("next(40) after the restore: %v up to %d compacted %v", batchIndices(out), upTo, compacted)
	}
}

// A full history reuses the room its dropped batches leave: appending
// allocates nothing once it is full, and a reader still gets every batch
// after its cursor, in order, through many rounds of reuse.
func TestFullHistoryReusesItsRoom(t *testing.T) {
	h := New(50)
	one := changesNamed("a")
	idx := uint64(0)
	for range 200 {
		idx++
		h.Append(idx, 0, one)
	}
	if a := testing.AllocsPerRun(1000, func() { idx++; h.Append(idx, 0, one) }); a != 0 {
		t.Fatalf("%v allocations per append to a full history, want 0", a)
	}
	for range 1000 {
		idx++
		h.Append(idx, int64(idx), changesNamed("a", "b")[:1+int(idx%2)])
		after := idx - 20
		batches, upTo, _, oldest, compacted := h.Next(after, 1000)
		if compacted || upTo != idx || len(batches) != 20 {
			t.Fatalf("at %d: Next(%d): %d batches up to %d, oldest %d, compacted %v", idx, after, len(batches), upTo, oldest, compacted)
		}
		for i, b := range batches {
			if b.Index != after+uint64(i)+1 {
				t.Fatalf("at %d: batch %d has index %d, want %d", idx, i, b.Index, after+uint64(i)+1)
			}
		}
		if h.Len() > 50 || oldest+50 < idx-25 {
			t.Fatalf("at %d: %d changes held, oldest %d", idx, h.Len(), oldest)
		}
	}
}

// An entry wakes a reader that took the wake channel, however many
// entries came before it untaken.
func TestWakeReachesTheReaderThatWaits(t *testing.T) {
	h := New(0)
	for i := uint64(1); i <= 10; i++ {
		h.Append(i, 0, nil) // nobody waits: no channel is made or closed
	}
	_, upTo, wake, _, _ := h.Next(10, 10)
	select {
	case <-wake:
		t.Fatal("woken before anything was applied")
	default:
	}
	h.Append(11, 0, nil)
	select {
	case <-wake:
	default:
		t.Fatalf("not woken by entry 11 (cursor was at %d)", upTo)
	}
}

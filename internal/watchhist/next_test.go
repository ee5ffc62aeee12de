package watchhist

import (
	"testing"

	"github.com/lockcluster/lockcluster/fsm"
)

// Next, the history's cursor for readers outside the package, returns what
// next does, in exported form: the batches after the cursor with their
// index, time and changes, how far the cursor may move, a wake that closes
// on the next append, and the oldest index when the cursor is compacted.
func TestWatchHistoryNextFollowsACursor(t *testing.T) {
	h := New(4)
	batches, upTo, wake, _, compacted := h.Next(0, 10)
	if compacted || len(batches) != 0 || upTo != 0 {
		t.Fatalf("Next(0) of an empty history: %+v up to %d compacted %v", batches, upTo, compacted)
	}
	h.Append(1, 100, changesNamed("a"))
	select {
	case <-wake:
	default:
		t.Fatal("an append did not close the wake Next returned")
	}
	h.Append(2, 200, nil)
	h.Append(3, 300, []fsm.Change{{Kind: fsm.ChangeReleased, Namespace: "ns", Names: []string{"a"}, Token: 7}})
	batches, upTo, wake, _, compacted = h.Next(0, 10)
	if compacted || upTo != 3 || len(batches) != 2 ||
		batches[0].Index != 1 || batches[0].Time != 100 || batches[0].Changes[0].Kind != fsm.ChangeGranted ||
		batches[1].Index != 3 || batches[1].Time != 300 || batches[1].Changes[0].Token != 7 {
		t.Fatalf("Next(0): %+v up to %d compacted %v", batches, upTo, compacted)
	}
	// A round bounded to one change: the first batch, the cursor only to it.
	if batches, upTo, _, _, _ := h.Next(0, 1); len(batches) != 1 || batches[0].Index != 1 || upTo != 1 {
		t.Fatalf("Next(0, 1): %+v up to %d", batches, upTo)
	}
	// At the head: nothing, the cursor stays, the wake is still open.
	if batches, upTo, _, _, _ := h.Next(3, 10); len(batches) != 0 || upTo != 3 {
		t.Fatalf("Next(3): %+v up to %d", batches, upTo)
	}
	select {
	case <-wake:
		t.Fatal("wake closed without an append")
	default:
	}
	// Past the bound the oldest changes go: a cursor before them is
	// compacted, with the oldest index it may resume from.
	h.Append(4, 400, changesNamed("b", "c", "d"))
	if _, _, _, oldest, compacted := h.Next(0, 10); !compacted || oldest != 1 {
		t.Fatalf("Next(0) after the drop: compacted %v oldest %d, want compacted at 1", compacted, oldest)
	}
	if batches, upTo, _, _, compacted := h.Next(1, 10); compacted || upTo != 4 || len(batches) != 2 || batches[1].Index != 4 || len(batches[1].Changes) != 3 {
		t.Fatalf("Next(1): %+v up to %d compacted %v", batches, upTo, compacted)
	}
}

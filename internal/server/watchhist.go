package server

import (
	"sort"
	"sync"

	"github.com/lockcluster/lockcluster/fsm"
)

// The watch history (SPEC §13): the changes of the entries this node
// applied most recently, in index order, shared by every watch served
// here. A watch is a cursor over it (the index of the last entry it has
// been given), not a queue of its own: a thousand watches of one busy
// namespace hold one copy of its changes. The history is bounded by a
// number of changes (Config.WatchHistory); the oldest entries' changes
// make room for the newest, and a watch whose cursor they leave behind is
// cut with COMPACTED (it resynchronises from a snapshot): never a silent
// gap.
//
// The history must see every entry this node applies from its start: the
// node feeds it from its raft adapter (internal/node: Append from the
// sink, Restored from the adapter's restore hook), before the server
// exists, since raft may apply entries (and restores its last snapshot)
// while the node is still being built. It knows the oldest index a watch
// can resume from: the index of the snapshot the node started from (or
// last installed), or the last entry whose changes it dropped.

// DefaultWatchHistory is how many changes a node keeps for watches to
// resume from, unless Config.WatchHistory says otherwise: at a few hundred
// bytes of memory each (their names are shared with the state), some tens
// of MiB.
const DefaultWatchHistory = 100_000

// WatchHistory is a node's bounded history of applied changes.
type WatchHistory struct {
	mu  sync.Mutex
	max int
	// batches: the changes of each entry that made any, in index order;
	// n counts their changes.
	batches []watchBatch
	n       int
	// oldest: every change of an entry after it is in batches (a watch may
	// resume from any index at or above it). applied: the last index
	// applied (or restored), with changes or without.
	oldest, applied uint64
	// wake is closed (and replaced) when applied moves or the history is
	// reset.
	wake chan struct{}
}

// watchBatch is the changes one entry made.
type watchBatch struct {
	index   uint64
	time    int64 // the leader's time in the entry, Unix nanoseconds
	changes []fsm.Change
}

// NewWatchHistory returns an empty history that keeps up to max changes
// (DefaultWatchHistory when max <= 0). Its oldest index is 0 until
// Restored says the node started from a snapshot.
func NewWatchHistory(max int) *WatchHistory {
	if max <= 0 {
		max = DefaultWatchHistory
	}
	return &WatchHistory{max: max, wake: make(chan struct{})}
}

// Append records the changes of the entry applied at index, with the
// leader's time in it; an entry without changes still moves the applied
// index. Entries arrive in index order (raft's FSM goroutine); an index
// at or below the last is ignored.
func (h *WatchHistory) Append(index uint64, time int64, changes []fsm.Change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if index <= h.applied {
		return
	}
	if len(changes) > 0 {
		h.batches = append(h.batches, watchBatch{index: index, time: time, changes: changes})
		h.n += len(changes)
		// Drop the oldest entries' changes past the bound; the newest
		// entry's stay, however many (one entry's changes are bounded
		// by the limits on what one entry may touch).
		drop := 0
		for h.n > h.max && drop < len(h.batches)-1 {
			h.n -= len(h.batches[drop].changes)
			h.oldest = h.batches[drop].index
			h.batches[drop] = watchBatch{} // nothing keeps its changes alive
			drop++
		}
		if drop > 0 {
			h.batches = h.batches[drop:]
		}
	}
	h.applied = index
	h.wakeLocked()
}

// Restored resets the history to the state of a snapshot at index (the
// node started from it, or installed it from the leader): nothing before
// it can be resumed from, and nothing after it has been applied yet.
func (h *WatchHistory) Restored(index uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.batches, h.n = nil, 0
	h.oldest, h.applied = index, index
	h.wakeLocked()
}

func (h *WatchHistory) wakeLocked() {
	close(h.wake)
	h.wake = make(chan struct{})
}

// Oldest is the oldest index a watch can resume from.
func (h *WatchHistory) Oldest() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.oldest
}

// Applied is the last index the history has seen applied.
func (h *WatchHistory) Applied() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.applied
}

// Len is the number of changes held.
func (h *WatchHistory) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// WatchBatch is the changes one applied entry made, as Next returns them.
type WatchBatch struct {
	Index uint64
	// Time is the leader's time in the entry, Unix nanoseconds.
	Time int64
	// Changes are read only: shared with the history (and the state).
	Changes []fsm.Change
}

// Next is next (below) for a reader outside this package: the status
// page's event stream (internal/web) follows the history as a watch does,
// by a cursor, waiting on wake between rounds. The Watch RPC and it take
// the same path through the history.
func (h *WatchHistory) Next(after uint64, maxChanges int) (batches []WatchBatch, upTo uint64, wake <-chan struct{}, oldest uint64, compacted bool) {
	out, upTo, wake, oldest, compacted := h.next(after, maxChanges)
	if len(out) > 0 {
		batches = make([]WatchBatch, len(out))
		for i, b := range out {
			batches[i] = WatchBatch{Index: b.index, Time: b.time, Changes: b.changes}
		}
	}
	return batches, upTo, wake, oldest, compacted
}

// next returns, for a cursor after (every change up to it was taken), the
// batches after it, of up to about maxChanges changes (at least one batch
// when there is one), and upTo: the index the cursor may move to, every
// change up to it being in what was returned (the last batch's index when
// more are left, else the applied index). compacted is true, with the
// oldest index, when the history no longer holds every change after after.
// wake is closed when more is applied.
func (h *WatchHistory) next(after uint64, maxChanges int) (out []watchBatch, upTo uint64, wake <-chan struct{}, oldest uint64, compacted bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if after < h.oldest {
		return nil, 0, nil, h.oldest, true
	}
	i := sort.Search(len(h.batches), func(i int) bool { return h.batches[i].index > after })
	n := 0
	j := i
	for j < len(h.batches) && (j == i || n+len(h.batches[j].changes) <= maxChanges) {
		n += len(h.batches[j].changes)
		j++
	}
	out = append([]watchBatch(nil), h.batches[i:j]...)
	upTo = max(after, h.applied)
	if j < len(h.batches) {
		upTo = h.batches[j-1].index
	}
	return out, upTo, h.wake, h.oldest, false
}

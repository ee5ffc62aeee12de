// Package watchhist owns a node's watch history (SPEC §13): the changes
// of the entries this node applied most recently, in index order, shared
// by every reader on the node: the Watch RPC (internal/server) and the
// status page's live feed (internal/web). A reader is a cursor over it
// (the index of the last entry it has been given), not a queue of its
// own: a thousand watches of one busy namespace hold one copy of its
// changes. The history is bounded by a number of changes (New's max); the
// oldest entries' changes make room for the newest, and a reader whose
// cursor they leave behind is told so (compacted: a watch is cut with
// COMPACTED and resynchronises from a snapshot): never a silent gap.
//
// The history must see every entry the node applies from its start: the
// node feeds it from its raft adapter (internal/node: Append from the
// sink, or Skip for an entry whose changes were not built because the
// cluster has never been watched; Restored from the adapter's restore
// hook), before the server exists, since raft may apply entries (and
// restores its last snapshot) while the node is still being built. It
// knows the oldest index a reader can resume from: the index of the
// snapshot the node started from (or last installed), of the last entry
// whose changes were not built, or of the last entry whose changes it
// dropped.
//
// Indexes here are raft's (raw): readers convert what they hand to
// clients (fsm.Machine.Logical).
package watchhist

import (
	"sort"
	"sync"
	"sync/atomic"

	"github.com/lockcluster/lockcluster/fsm"
)

// DefaultSize is how many changes a node keeps for watches to resume
// from, unless configured otherwise: at a few hundred bytes of memory each
// (their names are shared with the state), some tens of MiB.
const DefaultSize = 100_000

// History is a node's bounded history of applied changes.
type History struct {
	// mu: Append and Restored write; readers (Next, one per watch woken
	// by every entry) share it.
	mu  sync.RWMutex
	max int
	// batches: the changes of each entry that made any, in index order;
	// n counts their changes. The oldest are dropped from its front and
	// the room they leave is reused (compact), so that a full history
	// allocates nothing per entry.
	batches []Batch
	n       int
	// front is batches' whole backing array (len = cap): batches is
	// front[cap(front)-cap(batches):][:len(batches)], and what precedes
	// it is dropped batches (zeroed).
	front []Batch
	// oldest: every change of an entry after it is in batches (a reader
	// may resume from any index at or above it). applied: the last index
	// applied (or restored), with changes or without.
	oldest, applied uint64
	// wake is closed (and replaced) when applied moves or the history is
	// reset, if a reader has taken it since it was made (taken, set by
	// Next under the read lock): a node nobody watches makes and closes
	// no channel per entry.
	wake  chan struct{}
	taken atomic.Bool
}

// Batch is the changes one applied entry made.
type Batch struct {
	Index uint64
	// Time is the leader's time in the entry, Unix nanoseconds.
	Time int64
	// Changes are shared with the history and every reader: read only.
	Changes []fsm.Change
}

// New returns an empty history that keeps up to max changes (DefaultSize
// when max <= 0). Its oldest index is 0 until Restored says the node
// started from a snapshot.
func New(max int) *History {
	if max <= 0 {
		max = DefaultSize
	}
	return &History{max: max, wake: make(chan struct{})}
}

// Append records the changes of the entry applied at index, with the
// leader's time in it; an entry without changes still moves the applied
// index. Entries arrive in index order (raft's FSM goroutine); an index
// at or below the last is ignored.
func (h *History) Append(index uint64, time int64, changes []fsm.Change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if index <= h.applied {
		return
	}
	if len(changes) > 0 {
		if len(h.batches) == cap(h.batches) {
			h.grow()
		}
		h.batches = append(h.batches, Batch{Index: index, Time: time, Changes: changes}) // in place: grow made room
		h.n += len(changes)
		// Drop the oldest entries' changes past the bound; the newest
		// entry's stay, however many (one entry's changes are bounded
		// by the limits on what one entry may touch).
		drop := 0
		for h.n > h.max && drop < len(h.batches)-1 {
			h.n -= len(h.batches[drop].Changes)
			h.oldest = h.batches[drop].Index
			h.batches[drop] = Batch{} // nothing keeps its changes alive
			drop++
		}
		if drop > 0 {
			h.batches = h.batches[drop:]
		}
	}
	h.applied = index
	h.wakeLocked()
}

// Skip records that the entry applied at index built no changes (the
// cluster builds none until its first watch: fsm's startchanges.go):
// nothing up to it can be resumed from. An index at or below the last is
// ignored.
func (h *History) Skip(index uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if index <= h.applied {
		return
	}
	h.batches, h.front, h.n = nil, nil, 0
	h.oldest, h.applied = index, index
	h.wakeLocked()
}

// Restored resets the history to the state of a snapshot at index (the
// node started from it, or installed it from the leader): nothing before
// it can be resumed from, and nothing after it has been applied yet.
func (h *History) Restored(index uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.batches, h.front, h.n = nil, nil, 0
	h.oldest, h.applied = index, index
	h.wakeLocked()
}

// grow makes room for one more batch: it moves the live batches to the
// start of their array when at least half of it is dropped batches (a copy
// of n batches per n appended), or else to an array twice their number.
func (h *History) grow() {
	n := len(h.batches)
	if dropped := cap(h.front) - cap(h.batches); dropped > 0 && dropped >= n {
		copy(h.front, h.batches)
		clear(h.front[n:])
		h.batches = h.front[:n]
		return
	}
	h.front = make([]Batch, max(16, 2*n))
	copy(h.front, h.batches)
	h.batches = h.front[:n]
}

func (h *History) wakeLocked() {
	if !h.taken.Load() {
		return
	}
	h.taken.Store(false)
	close(h.wake)
	h.wake = make(chan struct{})
}

// Oldest is the oldest index a reader can resume from.
func (h *History) Oldest() uint64 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.oldest
}

// Applied is the last index the history has seen applied.
func (h *History) Applied() uint64 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.applied
}

// Len is the number of changes held.
func (h *History) Len() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.n
}

// Next returns, for a cursor after (every change up to it was taken), the
// batches after it, of up to about maxChanges changes (at least one batch
// when there is one), and upTo: the index the cursor may move to, every
// change up to it being in what was returned (the last batch's index when
// more are left, else the applied index). compacted is true, with the
// oldest index, when the history no longer holds every change after after.
// wake is closed when more is applied.
func (h *History) Next(after uint64, maxChanges int) (batches []Batch, upTo uint64, wake <-chan struct{}, oldest uint64, compacted bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if after < h.oldest {
		return nil, 0, nil, h.oldest, true
	}
	i := sort.Search(len(h.batches), func(i int) bool { return h.batches[i].Index > after })
	n := 0
	j := i
	for j < len(h.batches) && (j == i || n+len(h.batches[j].Changes) <= maxChanges) {
		n += len(h.batches[j].Changes)
		j++
	}
	if j > i {
		batches = append([]Batch(nil), h.batches[i:j]...)
	}
	upTo = max(after, h.applied)
	if j < len(h.batches) {
		upTo = h.batches[j-1].Index
	}
	h.taken.Store(true)
	return batches, upTo, h.wake, h.oldest, false
}

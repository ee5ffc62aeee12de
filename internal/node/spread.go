package node

import (
	"context"
	"time"

	"github.com/lockcluster/lockcluster/fsm"
)

// The initial spread of a cluster of G groups (issue 27 phase 3;
// groups.md §14): group 0 is built owning every slot and a group g ≥ 1
// none, and slots reach group g only through a move (I1, and "every
// ownership change goes through Freeze and Import, even for an empty
// slot"). So every node runs this loop until its replicas show the spread
// done, and proposes each step only in a group it leads, from what its
// own replicas have applied:
//
//  1. group g: SetGroup{g};
//  2. group 0: Freeze{g's slots, epoch 1, to g};
//  3. group g, once this node's replica of group 0 applied the Freeze:
//     its export's chunks (none for empty slots) and Import;
//  4. group 0, once this node's replica of group g applied the Import:
//     Drop.
//
// Steps 3 and 4 are any move's, which the mover drives (mover.go).
//
// Every step is idempotent (a repeat is a no-op), so several nodes, a new
// leader or a restart may repeat any of them. Group g's slots are
// spreadSlots(g): G contiguous ranges of the 4,096 slots. A call that
// arrives before its slot's step 3 is refused retryably (MOVING), which
// the client retries.

// spreadGroup is the group that serves slot in the static spread over
// groups groups.
func spreadGroup(slot uint16, groups int) int { return int(slot) * groups / fsm.Slots }

// SpreadGroup is the group that serves namespace ns on a cluster of
// groups groups bootstrapped by this release (bench --namespaces picks
// names spread evenly over the groups with it).
func SpreadGroup(ns string, groups int) int { return spreadGroup(fsm.Slot(ns), max(groups, 1)) }

// spreadSlots are group g's slots in the static spread, ascending.
func spreadSlots(g, groups int) []uint16 {
	var out []uint16
	for s := 0; s < fsm.Slots; s++ {
		if spreadGroup(uint16(s), groups) == g {
			out = append(out, uint16(s))
		}
	}
	return out
}

// spreadEpoch is the epoch of the spread's moves: the slots were owned by
// group 0 at epoch 0.
const spreadEpoch = 1

// spreadStep proposes the spread's first two steps of every group where
// this node leads the group that takes them (the mover does the rest:
// mover.go), records the spread done once this node's replicas show it,
// and reports whether they do.
func (n *Node) spreadStep(ctx context.Context) bool {
	if len(n.groups) < 2 {
		n.spreadDone.Store(true)
		return true
	}
	done := true
	for g := 1; g < len(n.groups); g++ {
		if !n.spreadGroupStep(ctx, g) {
			done = false
		}
	}
	if done {
		n.spreadDone.Store(true)
		n.log.Info("every group serves its slots", "groups", len(n.groups))
	}
	return done
}

// spreadGroupStep proposes group g's next step of the spread where this
// node leads the group that takes it, and reports whether this node's
// replicas show g's part done: g's slots left group 0 (Drop applied there,
// or a later move since).
func (n *Node) spreadGroupStep(ctx context.Context, g int) bool {
	z, gr := n.groups[0], n.groups[g]
	slots := spreadSlots(g, len(n.groups))
	v0 := z.machine.Slot(slots[0])
	if gr.machine.GroupSet() && v0.Epoch >= spreadEpoch && !v0.Frozen {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var err error
	var r fsm.Result
	switch {
	case !gr.machine.GroupSet():
		if gr.raft.IsLeader() {
			r, err = gr.srv.ProposeMove(ctx, &fsm.SetGroup{Group: gr.id})
		}
	case v0.Owned && v0.Epoch == 0:
		if z.raft.IsLeader() {
			r, err = z.srv.ProposeMove(ctx, &fsm.Freeze{Slots: slots, Epoch: spreadEpoch, To: gr.id})
		}
	}
	if err == nil && r.Err != nil {
		err = r.Err
	}
	if err != nil && ctx.Err() == nil {
		n.log.Warn("spreading the slots: a step failed; retrying", "group", g, "error", err)
	}
	return false
}

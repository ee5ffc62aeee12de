package node

import (
	"context"
	"fmt"
	"time"

	"github.com/lockcluster/lockcluster/fsm"
)

// The mover (issue 27 phase 4; groups.md §12). A move of slots from group
// A to group B begins with A's Freeze{slots, epoch, to B} (the initial
// spread's, or MoveSlots'), and from then on the groups' own logs say how
// far it got: A froze them (A's replica lists the move in MovesOut), B
// imported them (B's replica owns them at the epoch), A dropped them (the
// move leaves MovesOut). So every node runs the same loop over its own
// replicas and proposes a move's next step only in a group it leads:
//
//   - frozen in A, not imported in B: B's leader exports the slots from
//     its own replica of A (every replica that applied the Freeze exports
//     the same bytes: the frozen state never changes) and proposes the
//     chunks and the Import in B;
//   - imported in B: A's leader proposes Drop in A;
//   - rejected in B (an aborted move): A's leader proposes Unfreeze.
//
// Every step is idempotent, so a new leader, a second node or a restart
// may repeat any of them, and a move survives the loss of any leader
// with no record of its own (deviation from groups.md §12, whose mover
// runs on group 0's leader and records each phase in a directory: with
// every group on every node the groups' replicas are that record; the
// directory returns when groups live on subsets of the nodes).

// moverIdle is how often the loop looks at the replicas when no move is
// in progress; a Freeze applied here wakes it at once (kickMover).
const moverIdle = 100 * time.Millisecond

// moverBusy is how often it looks while a move is in progress here.
const moverBusy = 5 * time.Millisecond

// kickMover wakes the mover (the raft adapter calls it when an entry of
// a move applies).
func (n *Node) kickMover() {
	select {
	case n.moverKick <- struct{}{}:
	default:
	}
}

// runMover drives the spread, then every move this node's replicas show,
// until ctx ends.
func (n *Node) runMover(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.moverKick:
		}
		busy := false
		if !n.spreadDone.Load() {
			busy = !n.spreadStep(ctx)
		}
		if n.driveMoves(ctx) {
			busy = true
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		if busy {
			t.Reset(moverBusy)
		} else {
			t.Reset(moverIdle)
		}
	}
}

// driveMoves proposes the next step of every move out of any group that
// this node's replicas show in progress, where this node leads the group
// that takes it, and reports whether any move is in progress.
func (n *Node) driveMoves(ctx context.Context) bool {
	busy := false
	for _, a := range n.groups {
		for _, mv := range a.machine.MovesOut() {
			busy = true
			if err := n.moveStep(ctx, a, mv); err != nil && ctx.Err() == nil {
				n.log.Warn("moving slots: a step failed; retrying", "from", a.id, "to", mv.To, "slots", slotsString(mv.Slots), "epoch", mv.Epoch, "error", err)
			}
		}
	}
	return busy
}

// moveStep proposes move mv's next step out of group a, if this node
// leads the group it goes to.
func (n *Node) moveStep(ctx context.Context, a *group, mv fsm.OutMove) error {
	if int(mv.To) >= len(n.groups) {
		return fmt.Errorf("the target group %d is not one of this node's %d", mv.To, len(n.groups))
	}
	b := n.groups[mv.To]
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v := b.machine.Slot(mv.Slots[0])
	var r fsm.Result
	var err error
	switch {
	case v.Epoch >= mv.Epoch && (v.Owned || v.Frozen || v.Gone): // B imported
		if a.raft.IsLeader() && n.moveHook("drop", a, b) {
			r, err = a.srv.ProposeMove(ctx, &fsm.Drop{Slots: mv.Slots, Epoch: mv.Epoch})
		}
	case b.machine.Rejected(mv.Slots[0], mv.Epoch): // aborted: B will never import
		if a.raft.IsLeader() && n.moveHook("unfreeze", a, b) {
			r, err = a.srv.ProposeMove(ctx, &fsm.Unfreeze{Slots: mv.Slots, Epoch: mv.Epoch})
		}
	case b.raft.IsLeader() && b.machine.GroupSet() && n.moveHook("import", a, b):
		r, err = n.importMove(ctx, a, b, mv)
	}
	if err == nil && r.Err != nil {
		err = r.Err
	}
	return err
}

// moveHook runs Config.MoveHook, and reports whether the step may go on
// (a leader may have changed while the hook held it: look again).
func (n *Node) moveHook(step string, a, b *group) bool {
	if n.cfg.MoveHook == nil || !n.spreadDone.Load() { // not the spread's moves
		return true
	}
	n.cfg.MoveHook(step, a.id, b.id)
	if step == "import" {
		return b.raft.IsLeader()
	}
	return a.raft.IsLeader()
}

// importMove proposes in b the export of mv's slots, taken from this
// node's replica of a (which applied their Freeze).
func (n *Node) importMove(ctx context.Context, a, b *group, mv fsm.OutMove) (fsm.Result, error) {
	start := time.Now()
	x, err := a.machine.Export(mv.Slots, mv.Epoch)
	if err != nil {
		return fsm.Result{}, err
	}
	chunks := x.ImportChunks()
	cmds := make([]fsm.Command, 0, len(chunks)+1)
	for _, c := range chunks {
		cmds = append(cmds, c)
	}
	rs, err := b.srv.ProposeMoves(ctx, append(cmds, x.Import()))
	var r fsm.Result
	if len(rs) > 0 {
		r = rs[len(rs)-1]
	}
	if err == nil && r.Err == nil && len(rs) < len(cmds)+1 {
		err = fmt.Errorf("%d of the import's %d entries applied", len(rs), len(cmds)+1)
	}
	if err == nil && r.Err == nil && !r.Duplicate {
		b.raft.Announce() // the other replicas of b serve the slots as soon as they learn it
		n.log.Info("slots imported", "from", a.id, "to", b.id, "slots", slotsString(mv.Slots), "epoch", mv.Epoch, "chunks", len(chunks), "took", time.Since(start))
	}
	return r, err
}

// slotsString is a slot list for a log line: ranges, e.g. 0-1023,2048.
func slotsString(slots []uint16) string {
	out := ""
	for i := 0; i < len(slots); {
		j := i
		for j+1 < len(slots) && slots[j+1] == slots[j]+1 {
			j++
		}
		if out != "" {
			out += ","
		}
		if j > i {
			out += fmt.Sprintf("%d-%d", slots[i], slots[j])
		} else {
			out += fmt.Sprint(slots[i])
		}
		i = j + 1
	}
	return out
}

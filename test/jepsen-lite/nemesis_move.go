package main

import (
	"context"
	"fmt"
	"time"

	"github.com/lockcluster/lockcluster"
)

// nMove ("move", issue 27): on a cluster of several Raft groups (--groups),
// move the run's namespace's slot to another group, under the load, and
// wait until the move is done. The checkers then see whether any lock was
// granted twice, a token went back, a FIFO or a watch broke across it.
// Skipped on a cluster of one group.
const nMove = "move"

// moveBound bounds one move (MoveSlots to the slot served by its target).
const moveBound = 30 * time.Second

func (nm *nemesis) move(ctx context.Context) error {
	if nm.groups < 2 {
		return errUnsupported
	}
	a, err := lockcluster.DialAdmin(nm.c.Endpoints())
	if err != nil {
		return err
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(ctx, moveBound)
	defer cancel()
	p, err := a.Placement(ctx, nm.ns, 0)
	if err != nil {
		return fmt.Errorf("placement of %s: %w", nm.ns, err)
	}
	to := (p.Group + 1 + nm.rng.Intn(nm.groups-1)) % nm.groups
	desc := fmt.Sprintf("slot %d of %s: group %d to %d", p.Slot, nm.ns, p.Group, to)
	nm.record(nMove, "start", desc)
	if _, err := a.MoveSlots(ctx, []int{p.Slot}, to); err != nil {
		return fmt.Errorf("%s: %w", desc, err)
	}
	nm.counts[nMove]++
	for {
		q, err := a.Placement(ctx, "", p.Slot)
		if err == nil && q.Group == to && !q.Moving {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: not done within %s (last: %+v, %v)", desc, moveBound, q, err)
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	nm.record(nMove, "stop", desc)
	return nil
}

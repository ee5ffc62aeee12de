package node

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockcluster/lockcluster/fsm"
)

// routes tells the router which group serves a slot (groups.md §11), from
// this node's own replicas of every group: each group's ownership table
// says whether it owns a slot, froze it for a move (and to which group),
// or gave it away (and to which). Every node hosts a replica of every
// group, so the replicas are the directory; the owner of each slot is
// cached, and looked up again only when a group refuses a call for it.
// A stale answer is harmless (I1): the group's state machine refuses a
// slot it does not own, and the router parks the call and routes again.
type routes struct {
	groups []*group
	owner  [fsm.Slots]atomic.Uint32
	// changed is closed (and replaced) when a move entry applies in any
	// of this node's replicas: parked calls look again then.
	mu      sync.Mutex
	changed chan struct{}
}

func newRoutes(groups []*group) *routes {
	rt := &routes{groups: groups, changed: make(chan struct{})}
	for s := range fsm.Slots {
		rt.owner[s].Store(uint32(spreadGroup(uint16(s), len(groups))))
	}
	return rt
}

// cached is the group the router tries first for slot.
func (rt *routes) cached(slot uint16) *group { return rt.groups[rt.owner[slot].Load()] }

// resolve is the group that serves slot as this node's replicas show it,
// and whether it is settled: a group that owns it, not one that froze it
// and whose target has not imported it yet (the call would be refused,
// MOVING). A replica behind its group's leader may say owned when the
// leader has frozen it: the call is then refused and resolved again.
func (rt *routes) resolve(slot uint16) (*group, bool) {
	g := int(rt.owner[slot].Load())
	for range len(rt.groups) + 1 {
		v := rt.groups[g].machine.Slot(slot)
		switch {
		case v.Owned:
			rt.owner[slot].Store(uint32(g))
			return rt.groups[g], true
		case v.Frozen && int(v.To) < len(rt.groups):
			if t := rt.groups[v.To].machine.Slot(slot); t.Epoch >= v.Epoch && t.Owned {
				rt.owner[slot].Store(uint32(v.To))
				return rt.groups[v.To], true
			}
			return rt.groups[g], false
		case v.Gone && int(v.To) < len(rt.groups):
			g = int(v.To)
			continue
		}
		break
	}
	// This replica never owned it, or the chain left the groups: ask
	// every replica.
	for i, gr := range rt.groups {
		if gr.machine.Slot(slot).Owned {
			rt.owner[slot].Store(uint32(i))
			return gr, true
		}
	}
	return rt.groups[rt.owner[slot].Load()], false
}

// parkFor bounds how long a call waits for its slot's move (groups.md
// §11: then it gives up with MOVING, which the client retries).
const parkFor = 2 * time.Second

// parkPoll is how long a parked call waits for a move entry to apply
// before it looks at the replicas again anyway, and so the least time
// between two tries of one group that refused it and still looks
// settled here (this node's replica is behind its leader's Freeze).
const parkPoll = 10 * time.Millisecond

// notify wakes the parked calls: a move entry applied here.
func (rt *routes) notify() {
	rt.mu.Lock()
	close(rt.changed)
	rt.changed = make(chan struct{})
	rt.mu.Unlock()
}

func (rt *routes) wait() <-chan struct{} {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.changed
}

// park waits until this node's replicas show a settled owner of slot
// (refused: the group that refused the call, nil for none), and returns
// it; nil when deadline passes or ctx ends first. It looks again whenever
// a move entry applies here, and every parkPoll.
func (rt *routes) park(ctx context.Context, slot uint16, refused *group, deadline time.Time) *group {
	t := time.NewTimer(parkPoll)
	defer t.Stop()
	first := true
	for {
		changed := rt.wait()
		if g, ok := rt.resolve(slot); ok && (g != refused || !first) {
			return g
		}
		if time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-t.C:
			t.Reset(parkPoll)
			first = false
		}
	}
}

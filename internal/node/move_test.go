package node_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/node"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
)

// A slot moves between groups while its namespace serves (issue 27 phase
// 4; groups.md §12): a held lock stays held and its session alive, a
// waiter's queued request stays queued and is granted once the holder
// releases, with a larger token, and a client taking and releasing locks
// all along gets no error, every token larger than the one before; then
// the slot moves back, and the same holds.
func TestMoveSlotWhileServing(t *testing.T) {
	c := nodetest.Start(t, 3, nodetest.Options{Quiet: true, Groups: 2})
	ns := groupNamespaces(2)[0]
	slot := int(fsm.Slot(ns))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dial := func() *lockcluster.Client {
		cl, err := lockcluster.Dial(ctx, c.Addrs(), lockcluster.WithNamespace(ns), lockcluster.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close(context.Background()) })
		return cl
	}
	holder, waiter, worker, watching := dial(), dial(), dial(), dial()
	// A watch of "x" across the moves must see every grant of x: as a
	// change, or in a snapshot that resynchronises it.
	w, err := watching.Watch(ctx, lockcluster.WatchOptions{Names: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var seenMu sync.Mutex
	seen := map[uint64]bool{} // tokens of x's grants the watch showed
	go func() {
		for {
			ev, err := w.Next(ctx)
			if err != nil {
				return
			}
			seenMu.Lock()
			if ev.Snapshot != nil {
				for _, h := range ev.Snapshot.Held {
					seen[h.Token] = true
				}
			}
			for _, ch := range ev.Changes {
				if ch.Kind == lockcluster.ChangeGranted {
					seen[ch.Token] = true
				}
			}
			seenMu.Unlock()
		}
	}()
	sawGrant := func(token uint64) bool {
		seenMu.Lock()
		defer seenMu.Unlock()
		return seen[token]
	}
	admin, err := lockcluster.DialAdmin(c.Addrs())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()

	// The load: take and release "y" in a loop until stopped.
	var stop atomic.Bool
	var loadErr error
	var pairs atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var last uint64
		for !stop.Load() {
			l, err := worker.Acquire(ctx, "y", lockcluster.Options{})
			if err == nil && l.Token() <= last {
				err = errors.New("token did not grow")
			}
			if err == nil {
				last = l.Token()
				err = l.Release(ctx)
			}
			if err != nil {
				loadErr = err
				return
			}
			pairs.Add(1)
		}
	}()

	token := uint64(0)
	for round, to := range []int{1, 0} {
		held, err := holder.Acquire(ctx, "x", lockcluster.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if held.Token() <= token {
			t.Fatalf("round %d: token %d after %d", round, held.Token(), token)
		}
		granted := make(chan *lockcluster.Lock, 1)
		go func() {
			l, err := waiter.Acquire(ctx, "x", lockcluster.Options{})
			if err != nil {
				t.Errorf("round %d: the waiter: %v", round, err)
			}
			granted <- l
		}()
		c.WaitFor(10*time.Second, "the waiter's request queued", func() bool {
			q, err := holder.Query(ctx)
			return err == nil && len(q.Pending) == 1
		})
		before := pairs.Load()
		res, err := admin.MoveSlots(ctx, []int{slot}, to)
		if err != nil {
			t.Fatalf("round %d: move slot %d to group %d: %v", round, slot, to, err)
		}
		if res.FromGroup != 1-to || res.Epoch != round+1 {
			t.Errorf("round %d: the move left group %d at epoch %d, want group %d at epoch %d", round, res.FromGroup, res.Epoch, 1-to, round+1)
		}
		for i, nd := range c.Nodes {
			c.WaitFor(10*time.Second, "every replica sees the move done", func() bool {
				v := nd.GroupMachine(to).Slot(uint16(slot))
				w := nd.GroupMachine(1 - to).Slot(uint16(slot))
				return v.Owned && w.Gone && w.To == uint16(to)
			})
			_ = i
		}
		c.WaitFor(10*time.Second, "the load served by the new group", func() bool { return pairs.Load() > before+20 })
		if held.Err() != nil {
			t.Fatalf("round %d: the held lock was lost in the move: %v", round, held.Err())
		}
		select {
		case l := <-granted:
			t.Fatalf("round %d: the waiter was granted %v while the lock is held", round, l)
		default:
		}
		if err := held.Release(ctx); err != nil {
			t.Fatalf("round %d: release after the move: %v", round, err)
		}
		var l *lockcluster.Lock
		select {
		case l = <-granted:
		case <-ctx.Done():
			t.Fatalf("round %d: the waiter was not granted after the release", round)
		}
		if l == nil {
			t.FailNow()
		}
		if l.Token() <= held.Token() {
			t.Errorf("round %d: the waiter's token %d is not above the holder's %d: tokens must grow across a move", round, l.Token(), held.Token())
		}
		token = l.Token()
		c.WaitFor(10*time.Second, "the watch of x shows the grant made after the move", func() bool { return sawGrant(l.Token()) })
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		p, err := admin.Placement(ctx, ns, 0)
		if err != nil || p.Group != to || p.Moving {
			t.Errorf("round %d: placement of %s: %+v %v, want group %d settled", round, ns, p, err, to)
		}
	}
	stop.Store(true)
	wg.Wait()
	if loadErr != nil {
		t.Fatalf("the load got an error across the moves: %v", loadErr)
	}
	for _, cl := range []*lockcluster.Client{holder, waiter, worker} {
		if _, err := cl.Query(ctx); err != nil {
			t.Errorf("session %#x after the moves: %v", cl.SessionID(), err)
		}
	}
}

// A move survives the loss of the leader that was to take its next step
// (groups.md §12.4): held at the step by the mover's hook on every node,
// the node that leads the group of the step is stopped; a new leader of
// that group, on another node, takes the step, and the move ends with the
// lock still held by its session, a queued request still queued.
func TestMoveSurvivesLeaderLoss(t *testing.T) {
	for _, step := range []string{"import", "drop"} {
		t.Run(step, func(t *testing.T) {
			gate := make(chan struct{})
			reached := make(chan string, 8)
			c := nodetest.Start(t, 3, nodetest.Options{Quiet: os.Getenv("MOVE_LOGS") == "", Groups: 2, Node: func(cfg *node.Config) {
				id := cfg.ID
				cfg.MoveHook = func(s string, _, _ uint16) {
					if s != step {
						return
					}
					select {
					case reached <- id:
					default:
					}
					select {
					case <-gate:
					case <-time.After(30 * time.Second):
					}
				}
			}})
			ns := groupNamespaces(2)[0]
			slot := uint16(fsm.Slot(ns))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			holder, err := lockcluster.Dial(ctx, c.Addrs(), lockcluster.WithNamespace(ns), lockcluster.WithTTL(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close(context.Background())
			held, err := holder.Acquire(ctx, "x", lockcluster.Options{})
			if err != nil {
				t.Fatal(err)
			}
			admin, err := lockcluster.DialAdmin(c.Addrs())
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			if _, err := admin.MoveSlots(ctx, []int{int(slot)}, 1); err != nil {
				t.Fatal(err)
			}
			var victim string
			select {
			case victim = <-reached:
			case <-ctx.Done():
				t.Fatalf("no mover reached step %s", step)
			}
			vi := -1
			for i, nd := range c.Nodes {
				if nd.ID() == victim {
					vi = i
				}
			}
			g := 1 // the import is the target's step, the drop the source's
			if step == "drop" {
				g = 0
			}
			nd := c.Nodes[vi]
			stopped := make(chan struct{})
			go func() { defer close(stopped); c.Stop(vi) }()
			c.WaitFor(10*time.Second, "the victim's raft down", func() bool { return !nd.GroupRaft(g).IsLeader() })
			close(gate)
			<-stopped
			for i, nd := range c.Nodes {
				if nd == nil {
					continue
				}
				c.WaitFor(20*time.Second, "the move done on a running node", func() bool {
					return nd.GroupMachine(1).Slot(slot).Owned && nd.GroupMachine(0).Slot(slot).Gone
				})
				_ = i
			}
			if held.Err() != nil {
				t.Fatalf("the held lock was lost: %v", held.Err())
			}
			if err := held.Release(ctx); err != nil {
				t.Fatalf("release after the move: %v", err)
			}
			l, err := holder.Acquire(ctx, "x", lockcluster.Options{})
			if err != nil || l.Token() <= held.Token() {
				t.Fatalf("lock again after the move: %v, token %v after %d", err, l, held.Token())
			}
		})
	}
}

// The client's SlotOf is its own copy of the cluster's slot function
// (the client imports no server package): the two must agree, or the CLI's
// --namespace-of would move another namespace's slot.
func TestClientSlotIsTheCluster(t *testing.T) {
	for _, ns := range append(groupNamespaces(8), "", "default", "orders", "a", "ü-namespace") {
		if got, want := lockcluster.SlotOf(ns), int(fsm.Slot(ns)); got != want {
			t.Errorf("SlotOf(%q) = %d, the cluster's is %d", ns, got, want)
		}
	}
}

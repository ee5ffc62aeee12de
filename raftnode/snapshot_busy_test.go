package raftnode

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

// busyFSM's Snapshot fails its first busy calls, as lockcluster's does
// while another snapshot of its state is being encoded.
type busyFSM struct {
	*listFSM
	busy  atomic.Int32
	calls atomic.Int32
}

func (f *busyFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.calls.Add(1)
	if f.busy.Add(-1) >= 0 {
		return nil, errors.New("busy encoding another snapshot")
	}
	return f.listFSM.Snapshot()
}

// Node.Snapshot asks again while the FSM's Snapshot fails, and the
// snapshot it returns covers what was applied. It relies on raft's text
// for such a failure: a raft that changed it fails this test.
func TestSnapshotRetriesBusyFSM(t *testing.T) {
	t.Parallel()
	fsm := &busyFSM{listFSM: &listFSM{}}
	n := soloNode(t, fsm)
	testutil.Eventually(t, 10*time.Second, "leadership", n.IsLeader)
	propose(t, n, "a")
	applied := n.AppliedIndex()
	fsm.busy.Store(3)
	index, err := n.Snapshot(ctxTimeout(t, 10*time.Second))
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if calls := fsm.calls.Load(); calls != 4 || index < applied {
		t.Fatalf("the FSM was asked %d times (want 4), snapshot index %d (want at least %d)", calls, index, applied)
	}
	// A failure that persists ends with the context.
	fsm.busy.Store(1 << 30)
	propose(t, n, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := n.Snapshot(ctx); err == nil {
		t.Fatal("a snapshot of an FSM that stays busy succeeded")
	}
}

package raftnode

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// A leader that stops without handing over: the other two elect a new
// leader, which serves linearizable reads at once and accepts proposals.
func TestLeaderCrashElectsNewLeader(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	old := c.waitLeader()
	want := []string{"a", "b", "c"}
	propose(t, old.node, want...)

	sub, cancel := old.node.SubscribeLeadership()
	defer cancel()
	if v := <-sub; !v {
		t.Fatal("leader's subscription started with false")
	}
	c.stop(old, false)
	if v, ok := <-sub; v || !ok {
		t.Fatalf("after Shutdown the subscription gave (%v, %v), want a final false", v, ok)
	}
	if _, ok := <-sub; ok {
		t.Fatal("subscription not closed by Shutdown")
	}

	leader := c.waitLeader()
	if leader == old {
		t.Fatal("stopped node still leader")
	}
	// ReadBarrier on a fresh leader must already see every entry the old
	// leader acknowledged, without polling.
	if err := leader.node.ReadBarrier(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("ReadBarrier on new leader: %v", err)
	}
	if got := leader.fsm.Entries(); !slices.Equal(got, want) {
		t.Fatalf("new leader's FSM after ReadBarrier = %q, want %q", got, want)
	}
	propose(t, leader.node, "d")
	want = append(want, "d")
	c.waitEntries(want, c.running()...)
}

// A graceful Shutdown of the leader hands leadership over first.
func TestLeaderShutdownTransfersLeadership(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	old := c.waitLeader()
	propose(t, old.node, "a")
	n := old.node
	c.stop(old, true)
	if err := n.Shutdown(ctxTimeout(t, time.Second)); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if _, err := n.Propose(ctxTimeout(t, time.Second), []byte("x")); !errors.Is(err, ErrShutdown) || !errors.Is(err, ErrNotApplied) {
		t.Fatalf("Propose after Shutdown: %v, want ErrShutdown and ErrNotApplied", err)
	}
	if err := n.ReadBarrier(ctxTimeout(t, time.Second)); !errors.Is(err, ErrShutdown) {
		t.Fatalf("ReadBarrier after Shutdown: %v, want ErrShutdown", err)
	}
	leader := c.waitLeader()
	propose(t, leader.node, "b")
	c.waitEntries([]string{"a", "b"}, c.running()...)
}

// A follower restarted from its data dir comes back with its state (here
// from a snapshot, restored synchronously by New) and catches up.
func TestFollowerRestart(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	leader := c.waitLeader()
	var want []string
	for i := range 5 {
		want = append(want, fmt.Sprintf("e%d", i))
	}
	propose(t, leader.node, want...)
	f := c.followers(leader)[0]
	c.waitEntries(want, f)
	// A checkpoint entry may be applied after the snapshot and before the
	// stop: the restarted node starts from the snapshot's index.
	snapIndex, err := f.node.Snapshot(ctxTimeout(t, 5*time.Second))
	if err != nil {
		t.Fatalf("snapshot on %s: %v", f.id, err)
	}
	c.stop(f, true)

	var more []string
	for i := 5; i < 10; i++ {
		more = append(more, fmt.Sprintf("e%d", i))
	}
	propose(t, leader.node, more...)

	c.start(f, c.peers()) // Bootstrap is ignored: the dir has state
	if got := f.fsm.Entries(); !slices.Equal(got, want) {
		t.Fatalf("restarted follower's FSM right after New = %q, want its snapshot %q", got, want)
	}
	if got := f.node.AppliedIndex(); got < snapIndex {
		t.Fatalf("AppliedIndex after restart = %d, want >= the snapshot's %d", got, snapIndex)
	}
	c.waitEntries(append(want, more...), c.nodes...)
}

// Stopping and restarting every node keeps the state.
func TestWholeClusterRestart(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	leader := c.waitLeader()
	want := []string{"x", "y", "z"}
	propose(t, leader.node, want...)
	c.waitEntries(want, c.nodes...)
	if _, err := leader.node.Snapshot(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	propose(t, leader.node, "after-snapshot")
	want = append(want, "after-snapshot")
	c.waitEntries(want, c.nodes...)
	for _, tn := range c.nodes {
		c.stop(tn, false)
	}
	for _, tn := range c.nodes {
		c.start(tn, c.peers())
	}
	leader = c.waitLeader()
	c.waitEntries(want, c.nodes...)
	propose(t, leader.node, "w")
	c.waitEntries(append(want, "w"), c.nodes...)
}

// A leader cut off from its followers cannot know whether an appended
// entry commits: Propose says ErrOutcomeUnknown, not ErrNotLeader.
func TestProposeOutcomeUnknownWhenQuorumLost(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	leader := c.waitLeader()
	propose(t, leader.node, "a")
	for _, f := range c.followers(leader) {
		c.stop(f, false)
	}
	_, err := leader.node.Propose(ctxTimeout(t, 5*time.Second), []byte("b"))
	if !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrNotApplied) {
		t.Fatalf("Propose without quorum: %v, want ErrOutcomeUnknown", err)
	}
	if err := leader.node.ReadBarrier(ctxTimeout(t, 5*time.Second)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("ReadBarrier without quorum: %v, want ErrNotLeader", err)
	}
}

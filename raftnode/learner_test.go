package raftnode

import (
	"errors"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

// suffrageOf is id's suffrage in n's latest configuration ("" if absent).
func suffrageOf(t testing.TB, n *Node, id string) string {
	t.Helper()
	for _, m := range members(t, n) {
		if m.ID == id {
			return m.Suffrage
		}
	}
	return ""
}

// onLeader runs f on the leader until it succeeds, on the new leader if
// leadership moves meanwhile (a loaded machine can depose one); any other
// error fails the test. f must be idempotent.
func (c *cluster) onLeader(what string, f func(n *Node) error) {
	c.t.Helper()
	testutil.Eventually(c.t, 20*time.Second, what, func() bool {
		err := f(c.waitLeader().node)
		if err != nil && !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrOutcomeUnknown) {
			c.t.Fatalf("%s: %v", what, err)
		}
		return err == nil
	})
}

// A learner is added as raft's non-voter, receives the log, and becomes a
// voter by Promote; both are idempotent, run on the leader only, and a
// voter is never demoted by AddLearner.
func TestLearnerAddAndPromote(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	leader := c.waitLeader()
	want := []string{"a", "b"}
	propose(t, leader.node, want...)

	n4 := &testNode{id: "n4", dir: t.TempDir()}
	c.start(n4, nil)
	follower := c.followers(leader)[0]
	var nle *NotLeaderError
	if err := follower.node.AddLearner(ctxTimeout(t, 5*time.Second), n4.id, n4.addr); !errors.As(err, &nle) && !follower.node.IsLeader() {
		t.Fatalf("AddLearner on a follower: %v, want NotLeaderError", err)
	}
	c.onLeader("AddLearner", func(n *Node) error { return n.AddLearner(ctxTimeout(t, 5*time.Second), n4.id, n4.addr) })
	c.nodes = append(c.nodes, n4)
	c.waitEntries(want, n4)
	testutil.Eventually(t, 5*time.Second, "every node to see n4 as a non-voter", func() bool {
		for _, tn := range c.nodes {
			if suffrageOf(t, tn.node, n4.id) != "Nonvoter" {
				return false
			}
		}
		return true
	})
	// Idempotent, on the leader and (committed configuration) on any node.
	for _, tn := range c.nodes[:3] {
		if err := tn.node.AddLearner(ctxTimeout(t, 5*time.Second), n4.id, n4.addr); err != nil {
			t.Fatalf("second AddLearner on %s: %v", tn.id, err)
		}
	}
	if err := c.waitLeader().node.AddLearner(ctxTimeout(t, 5*time.Second), "n5", n4.addr); err == nil || errors.Is(err, ErrNotLeader) {
		t.Fatalf("AddLearner of a new ID at a member's address: %v, want refused", err)
	}
	if n4.node.IsLeader() || suffrageOf(t, n4.node, n4.id) != "Nonvoter" {
		t.Fatalf("n4 after the refused add: leader %v, suffrage %q", n4.node.IsLeader(), suffrageOf(t, n4.node, n4.id))
	}

	leader = c.waitLeader()
	follower = c.followers(leader)[0]
	if err := follower.node.Promote(ctxTimeout(t, 5*time.Second), n4.id); !errors.As(err, &nle) && !follower.node.IsLeader() {
		t.Fatalf("Promote on a follower: %v, want NotLeaderError", err)
	}
	c.onLeader("Promote of a non-member refused", func(n *Node) error {
		err := n.Promote(ctxTimeout(t, 5*time.Second), "nobody")
		if errors.Is(err, ErrNotMember) {
			return nil
		}
		if err == nil {
			t.Fatal("Promote of a non-member succeeded")
		}
		return err
	})
	c.onLeader("Promote", func(n *Node) error { return n.Promote(ctxTimeout(t, 5*time.Second), n4.id) })
	testutil.Eventually(t, 5*time.Second, "every node to see n4 as a voter", func() bool {
		for _, tn := range c.nodes {
			if suffrageOf(t, tn.node, n4.id) != "Voter" {
				return false
			}
		}
		return true
	})
	c.onLeader("Promote of a voter", func(n *Node) error { return n.Promote(ctxTimeout(t, 5*time.Second), n4.id) })
	// Adding a voter as a learner does not demote it.
	c.onLeader("AddLearner of a voter", func(n *Node) error { return n.AddLearner(ctxTimeout(t, 5*time.Second), n4.id, n4.addr) })
	if got := suffrageOf(t, n4.node, n4.id); got != "Voter" {
		t.Fatalf("n4 after AddLearner of a voter: %q, want still a voter", got)
	}
	c.onLeader("propose c", func(n *Node) error {
		_, err := n.Propose(ctxTimeout(t, 5*time.Second), []byte("c"))
		if errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("propose c: %v (a retry could apply it twice)", err)
		}
		return err
	})
	c.waitEntries(append(want, "c"), c.nodes...)
}

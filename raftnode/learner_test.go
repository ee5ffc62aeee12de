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
	if err := follower.node.AddLearner(ctxTimeout(t, 5*time.Second), n4.id, n4.addr); !errors.As(err, &nle) || nle.LeaderID != leader.id {
		t.Fatalf("AddLearner on a follower: %v, want NotLeaderError naming %s", err, leader.id)
	}
	if err := leader.node.AddLearner(ctxTimeout(t, 5*time.Second), n4.id, n4.addr); err != nil {
		t.Fatalf("AddLearner: %v", err)
	}
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
	for _, tn := range []*testNode{leader, follower} {
		if err := tn.node.AddLearner(ctxTimeout(t, 5*time.Second), n4.id, n4.addr); err != nil {
			t.Fatalf("second AddLearner on %s: %v", tn.id, err)
		}
	}
	if err := leader.node.AddLearner(ctxTimeout(t, 5*time.Second), "n5", n4.addr); err == nil {
		t.Fatal("AddLearner of a new ID at a member's address succeeded")
	}
	if n4.node.IsLeader() || suffrageOf(t, leader.node, n4.id) != "Nonvoter" {
		t.Fatalf("n4 after the refused add: leader %v, suffrage %q", n4.node.IsLeader(), suffrageOf(t, leader.node, n4.id))
	}

	if err := follower.node.Promote(ctxTimeout(t, 5*time.Second), n4.id); !errors.As(err, &nle) {
		t.Fatalf("Promote on a follower: %v, want NotLeaderError", err)
	}
	if err := leader.node.Promote(ctxTimeout(t, 5*time.Second), "nobody"); !errors.Is(err, ErrNotMember) {
		t.Fatalf("Promote of a non-member: %v, want ErrNotMember", err)
	}
	if err := leader.node.Promote(ctxTimeout(t, 5*time.Second), n4.id); err != nil {
		t.Fatalf("Promote: %v", err)
	}
	testutil.Eventually(t, 5*time.Second, "every node to see n4 as a voter", func() bool {
		for _, tn := range c.nodes {
			if suffrageOf(t, tn.node, n4.id) != "Voter" {
				return false
			}
		}
		return true
	})
	if err := leader.node.Promote(ctxTimeout(t, 5*time.Second), n4.id); err != nil {
		t.Fatalf("Promote of a voter: %v, want nil", err)
	}
	// Adding a voter as a learner does not demote it.
	if err := leader.node.AddLearner(ctxTimeout(t, 5*time.Second), n4.id, n4.addr); err != nil || suffrageOf(t, leader.node, n4.id) != "Voter" {
		t.Fatalf("AddLearner of a voter: %v, suffrage %q: want nil, still a voter", err, suffrageOf(t, leader.node, n4.id))
	}
	propose(t, leader.node, "c")
	c.waitEntries(append(want, "c"), c.nodes...)
}

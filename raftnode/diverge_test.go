//go:build divergencetest

package raftnode

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

// With the divergencetest build tag, LOCKCLUSTER_TEST_DIVERGE=n2:INDEX makes
// n2 hash one entry as if it had applied something else (plant_on.go). The
// next checkpoint fences n2: Diverged says so, the data directory is marked
// so a restart stays fenced, and n2 never wins an election. The others go on.
//
// Run: go test -race -tags hashicorpmetrics,divergencetest -run Diverge ./raftnode/
func TestPlantedDivergenceFencesTheReplica(t *testing.T) {
	t.Setenv("LOCKCLUSTER_TEST_DIVERGE", "n2:20") // after the anchor, which resets the chain
	c := newCluster(t, 3, func(cfg *Config) { cfg.CheckpointInterval = 50 * time.Millisecond })
	leader := c.waitLeader()
	for leader.id == "n2" { // the planted node must be a follower
		if err := leader.node.transferLeadership(ctxTimeout(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		leader = c.waitLeader()
	}
	n2 := c.nodes[1]
	testutil.Eventually(t, 10*time.Second, "the chain to start on n2", func() bool {
		_, _, known := n2.node.AppliedHash()
		return known
	})
	for leader.node.LastIndex() < 25 {
		propose(t, leader.node, "x")
	}
	testutil.Eventually(t, 20*time.Second, "n2 to fence itself", func() bool { return n2.node.Diverged() != nil })
	var d *divergedError
	if err := n2.node.Diverged(); !errors.As(err, &d) || !errors.Is(err, ErrDiverged) {
		t.Fatalf("Diverged() = %v", err)
	}
	t.Logf("n2: %v", d)
	for _, tn := range c.nodes {
		if tn != n2 && tn.node.Diverged() != nil {
			t.Fatalf("%s fenced itself too: %v", tn.id, tn.node.Diverged())
		}
	}
	if _, err := os.Stat(filepath.Join(n2.dir, divergedFile)); err != nil {
		t.Fatalf("the data directory is not marked: %v", err)
	}

	// A fenced node does not stand for election: its transport refuses to
	// send vote requests, and when the leader goes, the other node leads.
	if err := n2.node.clamp.RequestVote("n1", "127.0.0.1:1", nil, nil); !errors.Is(err, errFenced) {
		t.Fatalf("a fenced node's vote request: %v", err)
	}
	c.stop(leader, false)
	if got := c.waitLeader(); got == n2 {
		t.Fatal("the fenced node became leader")
	}
	c.start(leader, nil)
	c.waitLeader()

	// A restart keeps it fenced.
	c.stop(n2, true)
	c.start(n2, nil)
	if n2.node.Diverged() == nil {
		t.Fatal("n2 is no longer fenced after a restart")
	}
}

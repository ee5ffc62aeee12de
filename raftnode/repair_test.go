package raftnode

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

// markDirDamaged records d in a stopped node's data directory, as the
// checks at start do when they find damage.
func markDirDamaged(t *testing.T, dir string, d *storageDamage) {
	t.Helper()
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, damagedFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A damaged node neither votes nor stands for election until a leader has
// given it the committed log back; then it votes and may lead again.
//
// n1 leads; the followers n2 (then damaged) and n3 stop, and so does n1.
// With n2 and n3 alone, n3 cannot win: n2 refuses its vote requests, and
// n2 never asks. Without the fence they elect one of them at once. n1
// returns and leads (its vote and n3's); n2 follows it, is repaired, and
// with n1 gone again n2 and n3 elect a leader between them.
func TestDamagedNodeNeitherVotesNorLeadsUntilRepaired(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.waitLeader()
	for leader.id != "n1" {
		if err := leader.node.transferLeadership(ctxTimeout(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		leader = c.waitLeader()
	}
	propose(t, leader.node, "a", "b", "c")
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	c.waitEntries([]string{"a", "b", "c"}, n2, n3)

	c.stop(n2, false)
	c.stop(n3, false)
	c.stop(n1, false)
	markDirDamaged(t, n2.dir, &storageDamage{Store: "log", Path: n2.dir, Index: 3, Reason: "planted by the test"})

	c.start(n2, nil)
	c.start(n3, nil)
	if err := n2.node.Unfit(); !errors.Is(err, ErrDamaged) {
		t.Fatalf("n2 restarted damaged: Unfit() = %v, want ErrDamaged", err)
	}
	testutil.Eventually(t, 20*time.Second, "n2 to refuse n3's vote requests", func() bool {
		return n2.node.clamp.votesRefused.Load() >= 2
	})
	for _, tn := range c.running() {
		if tn.node.IsLeader() {
			t.Fatalf("%s leads with only n3's vote: a damaged node voted", tn.id)
		}
	}
	if err := n2.node.clamp.RequestVote("n3", raft.ServerAddress(n3.addr), nil, nil); !errors.Is(err, errFenced) {
		t.Fatalf("a damaged node's own vote request: %v", err)
	}

	c.start(n1, nil)
	if got := c.waitLeader(); got == n2 {
		t.Fatal("the damaged node became leader")
	}
	testutil.Eventually(t, 20*time.Second, "n2 to be repaired from the leader", func() bool { return n2.node.Damaged() == nil })
	if _, err := os.Stat(filepath.Join(n2.dir, damagedFile)); !os.IsNotExist(err) {
		t.Fatalf("the repaired data directory is still marked: %v", err)
	}
	if err := n2.node.Unfit(); err != nil {
		t.Fatalf("repaired n2 still unfit: %v", err)
	}

	refused := n2.node.clamp.votesRefused.Load()
	c.stop(c.waitLeader(), false)
	got := c.waitLeader()
	if got == nil || n2.node.clamp.votesRefused.Load() != refused {
		t.Fatalf("after the repair n2 still refused votes (%d → %d)", refused, n2.node.clamp.votesRefused.Load())
	}
}

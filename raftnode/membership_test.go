package raftnode

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

func TestJoinAndLeave(t *testing.T) {
	t.Parallel()
	// Timeouts of a second, not 500 ms: under CI's load the leader lost
	// its lease mid-test and the steps below met a cluster between
	// leaders (leader churn is not what this test is about).
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Second, time.Second, time.Second
	})
	leader := c.waitLeader()
	want := []string{"a", "b"}
	propose(t, leader.node, want...)

	// A node with no state and no Bootstrap waits to be joined.
	n4 := &testNode{id: "n4", dir: t.TempDir()}
	c.start(n4, nil)
	if id, _ := n4.node.Leader(); id != "" || n4.node.IsLeader() {
		t.Fatalf("unjoined node knows leader %q / is leader %v", id, n4.node.IsLeader())
	}

	// A follower refuses, naming the leader (asked again should the
	// leader change meanwhile).
	var follower *testNode
	var err error
	testutil.Eventually(t, 10*time.Second, "a follower's Join refused, naming the leader", func() bool {
		leader = c.waitLeader()
		follower = c.followers(leader)[0]
		err = follower.node.Join(ctxTimeout(t, 5*time.Second), n4.id, n4.addr)
		var nle *NotLeaderError
		return errors.As(err, &nle) && nle.LeaderID == leader.id && nle.LeaderAddr == leader.addr
	})

	// On a loaded machine the leader may step down meanwhile (a lease
	// missed while n4 opened its stores): join through whoever leads.
	var joinErr error
	testutil.Eventually(t, 10*time.Second, "n4 joined through the leader", func() bool {
		joinErr = c.waitLeader().node.Join(ctxTimeout(t, 5*time.Second), n4.id, n4.addr)
		return joinErr == nil || !errors.As(joinErr, new(*NotLeaderError))
	})
	if joinErr != nil {
		t.Fatalf("Join: %v", joinErr)
	}
	c.nodes = append(c.nodes, n4)
	c.waitEntries(want, n4)
	leader = c.waitLeader() // it may have changed (above)
	follower = c.followers(leader)[0]
	testutil.Eventually(t, 5*time.Second, "the join to be committed everywhere", func() bool {
		for _, tn := range c.nodes {
			if len(members(t, tn.node)) != 4 {
				return false
			}
		}
		return true
	})
	// Idempotent, on the leader and (committed configuration) on a follower.
	for _, tn := range []*testNode{leader, follower} {
		if err := tn.node.Join(ctxTimeout(t, 5*time.Second), n4.id, n4.addr); err != nil {
			t.Fatalf("second Join on %s: %v", tn.id, err)
		}
	}
	if err := leader.node.Join(ctxTimeout(t, 5*time.Second), "n5", n4.addr); err == nil {
		t.Fatal("Join of a new ID at a member's address succeeded")
	}
	for _, m := range members(t, leader.node) {
		if m.ID == n4.id && (m.Addr != n4.addr || m.Suffrage != "Voter" || m.Leader) {
			t.Fatalf("member n4 = %+v", m)
		}
	}
	propose(t, leader.node, "c")
	want = append(want, "c")
	c.waitEntries(want, c.nodes...)

	if err := leader.node.Leave(ctxTimeout(t, 5*time.Second), n4.id); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if got := members(t, leader.node); len(got) != 3 {
		t.Fatalf("Members after Leave = %+v, want 3", got)
	}
	if err := leader.node.Leave(ctxTimeout(t, 5*time.Second), n4.id); !errors.Is(err, ErrNotMember) || !strings.Contains(err.Error(), n4.id) {
		t.Fatalf("second Leave: %v, want ErrNotMember naming %s", err, n4.id)
	}
	c.stop(n4, true)
	c.nodes = c.nodes[:3]
	propose(t, leader.node, "d")
	c.waitEntries(append(want, "d"), c.running()...)
}

// Removing a dead member works, and the two survivors keep a quorum of
// the new two-voter configuration.
func TestRemoveDeadMember(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	leader := c.waitLeader()
	dead := c.followers(leader)[0]
	c.stop(dead, false)
	if err := leader.node.Leave(ctxTimeout(t, 5*time.Second), dead.id); err != nil {
		t.Fatalf("Leave of dead member: %v", err)
	}
	for _, m := range members(t, leader.node) {
		if m.ID == dead.id {
			t.Fatalf("dead member still listed: %+v", m)
		}
	}
	propose(t, leader.node, "a")
	c.waitEntries([]string{"a"}, c.running()...)
}

// A single node bootstrapped from Config.Bootstrap (own address left
// empty) elects itself and serves reads and writes.
func TestSingleNodeBootstrapFromConfig(t *testing.T) {
	t.Parallel()
	c := &cluster{t: t}
	tn := &testNode{id: "solo", dir: t.TempDir()}
	c.nodes = []*testNode{tn}
	c.start(tn, []Peer{{ID: "solo"}})
	sub, cancel := tn.node.SubscribeLeadership()
	defer cancel()
	testutil.Eventually(t, 10*time.Second, "leadership notification", func() bool {
		select {
		case v := <-sub:
			return v
		default:
			return false
		}
	})
	c.waitLeader()
	propose(t, tn.node, "a")
	if err := tn.node.ReadBarrier(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("ReadBarrier: %v", err)
	}
	if m := members(t, tn.node); len(m) != 1 || m[0].Addr != tn.addr || !m[0].Leader {
		t.Fatalf("Members = %+v", m)
	}
	if err := tn.node.transferLeadership(ctxTimeout(t, 5*time.Second)); err == nil {
		t.Fatal("TransferLeadership with no other voter succeeded")
	}
}

func members(t testing.TB, n *Node) []Member {
	t.Helper()
	m, err := n.Members()
	if err != nil {
		t.Fatalf("Members: %v", err)
	}
	return m
}

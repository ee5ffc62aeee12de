package raftnode

import (
	"testing"
	"time"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

// The leader learns from raft's heartbeat observations that a follower
// stopped answering, and since when; once it answers again, that it
// resumed. A follower never failing has no report. Without the observer
// (or if raft stopped reporting), the stopped follower would have none.
func TestPeerContactFromHeartbeats(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.waitLeader()
	f := c.followers(leader)
	dead, alive := f[0], f[1]
	before := time.Now()
	c.stop(dead, false)
	testutil.Eventually(t, 10*time.Second, "the leader to report the stopped follower's heartbeats failing", func() bool {
		pc, ok := leader.node.PeerContact(dead.id)
		return ok && pc.Failing
	})
	pc, _ := leader.node.PeerContact(dead.id)
	if pc.LastContact.IsZero() || pc.LastContact.After(time.Now()) {
		t.Fatalf("the stopped follower's last contact: %v (stopped after %v)", pc.LastContact, before)
	}
	if pc, ok := leader.node.PeerContact(alive.id); ok && pc.Failing {
		t.Fatalf("the live follower reported failing: %+v", pc)
	}
	if _, ok := alive.node.PeerContact(leader.id); ok {
		t.Fatal("a node that does not lead answered PeerContact")
	}
	c.start(dead, nil)
	testutil.Eventually(t, 20*time.Second, "the leader to report the restarted follower's heartbeats resumed", func() bool {
		pc, ok := leader.node.PeerContact(dead.id)
		return ok && !pc.Failing
	})
}

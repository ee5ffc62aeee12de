package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/raftnode"
)

// The fake's learners: a replica in fakeLog.learners, or an id-only member
// of extra with suffrage "Nonvoter".

func (l *fakeLog) suffrageLocked(id string) string {
	if l.learners[id] {
		return "Nonvoter"
	}
	return "Voter"
}

// setLearner makes replica id a non-voter (as if it had joined as one).
func (fc *fakeCluster) setLearner(id string) {
	fc.log.mu.Lock()
	defer fc.log.mu.Unlock()
	if fc.log.learners == nil {
		fc.log.learners = map[string]bool{}
	}
	fc.log.learners[id] = true
}

func (r *fakeReplica) AddLearner(ctx context.Context, id, addr string) error {
	return r.addServer(id, addr, "Nonvoter") // a voter stays one
}

func (r *fakeReplica) Promote(ctx context.Context, id string) error {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	if r.log.leader != r.id {
		return r.notLeaderLocked()
	}
	for _, o := range r.log.reps {
		if o.id == id {
			delete(r.log.learners, id)
			return nil
		}
	}
	for i, m := range r.log.extra {
		if m.ID == id {
			r.log.extra[i].Suffrage = "Voter"
			return nil
		}
	}
	return fmt.Errorf("%w: %q", raftnode.ErrNotMember, id)
}

// membersVia is Members asked of node via, by id.
func (fc *fakeCluster) membersVia(t *testing.T, via string) map[string]*pb.Member {
	t.Helper()
	r, err := fc.node(via).clus.Members(testCtx(t), &pb.MembersRequest{})
	if err != nil {
		t.Fatalf("members via %s: %v", via, err)
	}
	out := map[string]*pb.Member{}
	for _, m := range r.Members {
		out[m.Id] = m
	}
	return out
}

// grow appends n entries to the log through leader (its own directory
// record again: an entry that changes nothing).
func (fc *fakeCluster) grow(t *testing.T, leader string, n int) {
	t.Helper()
	s := fc.node(leader).srv
	for range n {
		if _, _, err := s.propose(testCtx(t), &fsm.SetMember{Member: s.cfg.Self}); err != nil {
			t.Fatal(err)
		}
	}
}

// rounds is how many probe rounds in a row node on's probes saw learner id
// caught up.
func (fc *fakeCluster) rounds(on, id string) int {
	l := &fc.node(on).srv.members.learners
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rounds[id]
}

// A learner far behind is listed as one, with how far behind it is and the
// bound; a promotion by hand is refused naming how far; once it catches up
// the leader promotes it by itself.
func TestLearnerPromotedOnceCaughtUp(t *testing.T) {
	fc := newFakeCluster(t, 4, fakeOptions{configure: func(c *Config) { c.ProbeInterval = 5 * time.Millisecond }})
	ctx := testCtx(t)
	fc.hold("n4", true)
	fc.grow(t, "n1", promoteWithin+100)
	fc.setLearner("n4") // far behind already: caught up, it would be promoted

	eventually(t, "the leader to see learner n4 far behind", func() bool {
		m := fc.membersVia(t, "n2")["n4"]
		return m.Suffrage == "Nonvoter" && m.Probed && m.Lag > promoteWithin && m.PromoteWithin == promoteWithin && !m.NoPromote
	})
	if n := fc.rounds("n1", "n4"); n != 0 {
		t.Fatalf("a learner far behind counts %d rounds caught up", n)
	}
	_, err := fc.node("n3").clus.Promote(ctx, &pb.PromoteRequest{Id: "n4"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "entries behind") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("promote a learner far behind: %v: want FailedPrecondition naming how far behind", err)
	}
	var behind uint64
	if i := strings.Index(err.Error(), "n4 is "); i < 0 {
		t.Fatalf("the refusal does not say how far: %v", err)
	} else if _, serr := fmt.Sscanf(err.Error()[i:], "n4 is %d entries behind", &behind); serr != nil || behind <= promoteWithin {
		t.Fatalf("the refusal says %d entries behind (%v): %v", behind, serr, err)
	}
	if m := fc.membersVia(t, "n1")["n4"]; m.Suffrage != "Nonvoter" {
		t.Fatalf("n4 after the refusal: %v", m)
	}

	fc.hold("n4", false)
	eventually(t, "the leader to promote n4 once caught up", func() bool {
		return fc.membersVia(t, "n3")["n4"].Suffrage == "Voter"
	})
	if m := fc.membersVia(t, "n1")["n4"]; m.PromoteWithin != 0 || m.NoPromote {
		t.Fatalf("a voter with learner fields: %v", m)
	}
}

// A learner joined with no_promote is not promoted however long it has
// been caught up, also by a new leader (the mark travels with the probes);
// Promote does it by hand, and the even-voter warning counts voters only.
func TestLearnerNoPromoteWaitsForPromote(t *testing.T) {
	fc := newFakeCluster(t, 4, fakeOptions{configure: func(c *Config) { c.ProbeInterval = 5 * time.Millisecond }})
	ctx := testCtx(t)
	fc.hold("n4", true) // not caught up until marked
	fc.grow(t, "n1", promoteWithin+100)
	fc.setLearner("n4")
	resp, err := fc.node("n2").clus.Join(ctx, &pb.JoinRequest{Id: "n4", RaftAddr: "raft-n4", GrpcAddr: "passthrough:///api-n4", Learner: true, NoPromote: true})
	if err != nil || !resp.Learner || resp.Voters != 3 || resp.Warning != "" {
		t.Fatalf("join n4 as a no-promote learner: %v, %v: want a learner, 3 voters, no warning", resp, err)
	}
	fc.hold("n4", false)
	eventually(t, "n4 caught up for many rounds on n1", func() bool { return fc.rounds("n1", "n4") >= promoteRounds+3 })
	m := fc.membersVia(t, "n3")["n4"]
	if m.Suffrage != "Nonvoter" || !m.NoPromote || m.Lag > promoteWithin {
		t.Fatalf("a caught-up no-promote learner: %v", m)
	}
	eventually(t, "n2 and n3 to hear the no-promote mark", func() bool {
		return fc.node("n2").srv.members.learners.manual("n4") && fc.node("n3").srv.members.learners.manual("n4")
	})

	fc.elect("n2")
	eventually(t, "n4 caught up for many rounds on n2", func() bool { return fc.rounds("n2", "n4") >= promoteRounds+3 })
	if m := fc.membersVia(t, "n1")["n4"]; m.Suffrage != "Nonvoter" || !m.NoPromote {
		t.Fatalf("the new leader promoted a no-promote learner, or forgot the mark: %v", m)
	}

	pr, err := fc.node("n3").clus.Promote(ctx, &pb.PromoteRequest{Id: "n4"})
	if err != nil || pr.Voters != 4 || pr.AlreadyVoter || !strings.Contains(pr.Warning, "4 voters") {
		t.Fatalf("promote n4 by hand: %v, %v: want 4 voters and the even-count warning", pr, err)
	}
	if m := fc.membersVia(t, "n1")["n4"]; m.Suffrage != "Voter" {
		t.Fatalf("n4 after Promote: %v", m)
	}
	if pr, err := fc.node("n1").clus.Promote(ctx, &pb.PromoteRequest{Id: "n4"}); err != nil || !pr.AlreadyVoter {
		t.Fatalf("promote a voter: %v, %v: want already a voter", pr, err)
	}
	if _, err := fc.node("n1").clus.Promote(ctx, &pb.PromoteRequest{Id: "nobody"}); status.Code(err) != codes.NotFound {
		t.Fatalf("promote a non-member: %v: want NotFound", err)
	}
}

// Joining learners leaves the voter count, and so the even-count warning,
// alone; a learner that the leader cannot probe is not promoted, and a
// promotion by hand says why, unless forced.
func TestLearnerJoinCountsVotersOnly(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{configure: func(c *Config) { c.ProbeInterval = 5 * time.Millisecond }})
	ctx := testCtx(t)
	for _, id := range []string{"n8", "n9"} {
		resp, err := fc.node("n2").clus.Join(ctx, &pb.JoinRequest{Id: id, RaftAddr: "raft-" + id, Learner: true})
		if err != nil || !resp.Learner || resp.Voters != 3 || resp.Warning != "" {
			t.Fatalf("join %s as a learner: %v, %v: want a learner, 3 voters, no warning", id, resp, err)
		}
	}
	m := fc.membersVia(t, "n1")["n9"]
	if m.Suffrage != "Nonvoter" || m.PromoteWithin != promoteWithin {
		t.Fatalf("learner n9: %v", m)
	}
	_, err := fc.node("n1").clus.Promote(ctx, &pb.PromoteRequest{Id: "n9"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "no API address") {
		t.Fatalf("promote a learner never probed: %v: want FailedPrecondition saying why", err)
	}
	pr, err := fc.node("n3").clus.Promote(ctx, &pb.PromoteRequest{Id: "n9", Force: true})
	if err != nil || pr.Voters != 4 || pr.Warning == "" {
		t.Fatalf("forced promote: %v, %v: want 4 voters, warned", pr, err)
	}
	// Leaving forgets a learner.
	if _, err := fc.node("n2").clus.Leave(ctx, &pb.LeaveRequest{Id: "n8"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := fc.membersVia(t, "n1")["n8"]; ok {
		t.Fatal("n8 listed after leave")
	}
}

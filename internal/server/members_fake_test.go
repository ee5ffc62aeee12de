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
	"github.com/lockcluster/lockcluster/raftnode"
)

// Members says what the leader sees of each member, wherever it is asked:
// a follower forwards the call. A member that lags shows its lag; one whose
// API stops answering shows as unreachable since its last answer, not as a
// healthy follower.
func TestMembersShowWhatTheLeaderSees(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{configure: func(c *Config) { c.ProbeInterval = 5 * time.Millisecond }})
	ctx := testCtx(t)
	members := func(via string) map[string]*pb.Member { return membersVia(t, ctx, fc, via) }
	eventually(t, "every member probed and reachable", func() bool {
		ms := members("n2")
		for _, id := range []string{"n1", "n2", "n3"} {
			if m := ms[id]; m == nil || !m.Probed || !m.Reachable || m.Lag != 0 || m.Version == "" {
				return false
			}
		}
		return true
	})

	fc.hold("n3", true)
	s := fc.node("n1").open(t, "lag")
	for i := range 3 {
		if _, err := fc.node("n1").request(ctx, s, "lag", uint64(i+1), "x"); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "n3's lag of 4 entries", func() bool { return members("n1")["n3"].Lag == 4 })
	if m := members("n2")["n3"]; !m.Reachable || m.AppliedIndex+4 != uint64(fc.entries()) {
		t.Fatalf("a lagging member: %v: want reachable, 4 behind the log's %d entries", m, fc.entries())
	}

	fc.node("n3").down.Store(true)
	eventually(t, "n3 unreachable", func() bool { return !members("n1")["n3"].Reachable })
	fc.clock.Advance(12 * time.Second)
	ms := members("n2")
	if m := ms["n3"]; !m.Probed || m.Reachable || m.SinceContact.AsDuration() < 12*time.Second {
		t.Fatalf("a member whose API stopped: %v: want unreachable for at least 12s", m)
	}
	for _, id := range []string{"n1", "n2"} {
		if m := ms[id]; !m.Reachable {
			t.Fatalf("%s: %v: want reachable", id, m)
		}
	}
	if !ms["n1"].Leader || ms["n1"].Lag != 0 {
		t.Fatalf("the leader: %v", ms["n1"])
	}
}

// A member that is unfit to serve (raftnode's fences: here a damaged log)
// still answers Status, saying why, while every other call on it fails
// Unavailable; the leader's probes carry the reason into Members, wherever
// it is asked, with the member reachable: not "unreachable for 12s". Once
// the fence is lowered, Members says so too.
func TestFencedMemberSaysWhy(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{configure: func(c *Config) { c.ProbeInterval = 5 * time.Millisecond }})
	ctx := testCtx(t)
	members := func(via string) map[string]*pb.Member { return membersVia(t, ctx, fc, via) }
	eventually(t, "every member probed and reachable", func() bool {
		ms := members("n2")
		for _, id := range []string{"n1", "n2", "n3"} {
			if m := ms[id]; m == nil || !m.Probed || !m.Reachable {
				return false
			}
		}
		return true
	})
	if st, err := fc.node("n3").clus.Status(ctx, &pb.StatusRequest{}); err != nil || st.Unfit != "" {
		t.Fatalf("a fit node's Status: %v, %v: want no unfit", st, err)
	}

	damage := fmt.Errorf("this node's raft log is damaged from index 882 (/data/raft/wal/00001.wal: %w: bad frame header); it serves no clients", raftnode.ErrDamaged)
	fc.setUnfit("n3", damage)
	st, err := fc.node("n3").clus.Status(ctx, &pb.StatusRequest{})
	if err != nil || st.Unfit != damage.Error() || st.NodeId != "n3" {
		t.Fatalf("the fenced node's Status: %v, %v: want it to answer, unfit %q", st, err, damage)
	}
	if _, err := fc.node("n3").clus.Members(ctx, &pb.MembersRequest{}); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("Members on the fenced node: %v: want Unavailable naming the damage (only Status is exempt)", err)
	}
	if _, err := fc.node("n3").locks.Query(ctx, &pb.QueryRequest{Namespace: "ns"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("Query on the fenced node: %v: want Unavailable", err)
	}

	eventually(t, "the leader to see n3 fenced", func() bool { return members("n1")["n3"].Unfit != "" })
	for _, via := range []string{"n1", "n2"} {
		ms := members(via)
		if m := ms["n3"]; !m.Probed || !m.Reachable || m.Unfit != damage.Error() {
			t.Fatalf("the fenced member, via %s: %v: want reachable, unfit %q", via, m, damage)
		}
		for _, id := range []string{"n1", "n2"} {
			if m := ms[id]; !m.Reachable || m.Unfit != "" {
				t.Fatalf("%s, via %s: %v: want reachable and fit", id, via, m)
			}
		}
	}

	fc.setUnfit("n3", nil)
	eventually(t, "the leader to see n3 fit again", func() bool { return members("n2")["n3"].Unfit == "" })
	if st, err := fc.node("n3").clus.Status(ctx, &pb.StatusRequest{}); err != nil || st.Unfit != "" {
		t.Fatalf("the node's Status once fit: %v, %v", st, err)
	}
}

// A join that leaves an even number of voters says so (and the log warns):
// four voters tolerate one failure, as three do, with a larger majority.
func TestJoinWarnsOfAnEvenVoterCount(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	ctx := testCtx(t)
	r, err := fc.node("n2").clus.Join(ctx, &pb.JoinRequest{Id: "n4", RaftAddr: "raft-n4"})
	if err != nil || r.Voters != 4 || !strings.Contains(r.Warning, "4 voters") {
		t.Fatalf("the fourth voter: %v, %v: want a warning", r, err)
	}
	r, err = fc.node("n2").clus.Join(ctx, &pb.JoinRequest{Id: "n5", RaftAddr: "raft-n5"})
	if err != nil || r.Voters != 5 || r.Warning != "" {
		t.Fatalf("the fifth voter: %v, %v: want no warning", r, err)
	}
}

// membersVia is the Members answer asked of node via, by member id.
func membersVia(t *testing.T, ctx context.Context, fc *fakeCluster, via string) map[string]*pb.Member {
	t.Helper()
	r, err := fc.node(via).clus.Members(ctx, &pb.MembersRequest{})
	if err != nil {
		t.Fatalf("members via %s: %v", via, err)
	}
	out := map[string]*pb.Member{}
	for _, m := range r.Members {
		out[m.Id] = m
	}
	return out
}

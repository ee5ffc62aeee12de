package server

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/raftnode"
)

// waitSecret waits until every node applied the cluster secret, when
// every node runs the level that draws it (the leader draws it once its
// probes have heard every member: level.go).
func (fc *fakeCluster) waitSecret() {
	fc.t.Helper()
	for _, n := range fc.nodes {
		if n.srv.ownLevel() < fsm.LevelClusterSecret {
			return
		}
	}
	eventually(fc.t, "the cluster secret on every node", func() bool {
		for _, n := range fc.nodes {
			if n.m.ClusterSecret() == "" {
				return false
			}
		}
		return true
	})
}

// secretEntries counts the SetClusterSecret entries in the log.
func (fc *fakeCluster) secretEntries() int {
	n := 0
	for _, cmd := range fc.commands(1) {
		if _, ok := cmd.(*fsm.SetClusterSecret); ok {
			n++
		}
	}
	return n
}

// snapVersion is the format version of node n's next snapshot.
func snapVersion(t *testing.T, n *fakeNode) uint32 {
	t.Helper()
	b, err := n.m.BeginSnapshot().Encode()
	if err != nil {
		t.Fatal(err)
	}
	_, v, err := fsm.SnapshotHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// levelsSeen is each member's protocol level as Members via node says it.
func levelsSeen(t *testing.T, fc *fakeCluster, via string) map[string]uint32 {
	t.Helper()
	r, err := fc.node(via).clus.Members(testCtx(t), &pb.MembersRequest{})
	if err != nil {
		t.Fatalf("members via %s: %v", via, err)
	}
	out := map[string]uint32{}
	for _, m := range r.Members {
		out[m.Id] = m.ProtocolLevel
	}
	return out
}

// A cluster with a member of the release before (level 1) never proposes
// the cluster secret, a level-2 entry: the leader's draw waits, the gate
// says why (FailedPrecondition naming the feature, the levels and the
// member), and the snapshots stay in format 2, which that member reads.
// Once the member runs level 2 (upgraded), the next probe raises the
// cluster level and the secret is drawn, once; snapshots carry it
// (format 3) from then on.
func TestGateHoldsTheSecretAndSnapshotFormat(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{configure: func(c *Config) {
		c.ProbeInterval = 5 * time.Millisecond
		if c.Self.ID == "n3" {
			c.ProtocolLevel = fsm.PreviousLevel
		}
	}})
	n1, n3 := fc.node("n1"), fc.node("n3")
	eventually(t, "the leader hears every member's level", func() bool {
		ls := levelsSeen(t, fc, "n2")
		return ls["n1"] == fsm.ProtocolLevel && ls["n2"] == fsm.ProtocolLevel && ls["n3"] == fsm.PreviousLevel
	})
	st, err := n1.clus.Status(testCtx(t), &pb.StatusRequest{})
	if err != nil || st.ProtocolLevel != fsm.ProtocolLevel || st.ClusterLevel != fsm.PreviousLevel {
		t.Fatalf("the leader's status: %v, %v; want its level %d and the cluster's %d", st, err, fsm.ProtocolLevel, fsm.PreviousLevel)
	}
	if st, err := n3.clus.Status(testCtx(t), &pb.StatusRequest{}); err != nil || st.ProtocolLevel != fsm.PreviousLevel || st.ClusterLevel != 0 {
		t.Fatalf("n3's status: %v, %v; want level %d, no cluster level on a follower", st, err, fsm.PreviousLevel)
	}
	// Several probe rounds later, still nothing.
	for range 3 {
		<-n1.srv.levels.wait()
	}
	if fc.secretEntries() != 0 || n1.m.ClusterSecret() != "" {
		t.Fatal("the cluster secret was proposed while a member runs the release before")
	}
	for _, n := range fc.nodes {
		if v := snapVersion(t, n); v != 2 || fsm.SnapshotLevel(v) > fsm.PreviousLevel {
			t.Fatalf("%s writes snapshot format %d (level %d) below level %d", n.id, v, fsm.SnapshotLevel(v), fsm.LevelClusterSecret)
		}
	}
	err = n1.srv.gateLevel(&fsm.SetClusterSecret{})
	st2 := status.Convert(err)
	if st2.Code() != codes.FailedPrecondition {
		t.Fatalf("the gate: %v; want FailedPrecondition", err)
	}
	for _, want := range []string{"the cluster secret", "needs protocol level 2", "cluster runs at level 1", "member n3 runs level 1 (version ", "upgrade every member"} {
		if !strings.Contains(st2.Message(), want) {
			t.Errorf("the gate's refusal %q does not say %q", st2.Message(), want)
		}
	}
	info := errorInfo(st2)
	if info == nil || info.Reason != pb.ErrorReason_CLUSTER_LEVEL.String() || info.Metadata["lowest_member"] != "n3" ||
		info.Metadata["cluster_level"] != "1" || info.Metadata["needed_level"] != "2" {
		t.Fatalf("the gate's ErrorInfo: %v", info)
	}
	// Proposing it anyway is refused by propose itself, before the log.
	before := fc.entries()
	if _, _, err := n1.srv.propose(testCtx(t), &fsm.SetClusterSecret{Secret: strings.Repeat("s", 32)}); !errors.As(err, new(*levelError)) || fc.entries() != before {
		t.Fatalf("proposing a level-2 entry at level 1: %v, %d entries; want the gate's refusal and none", err, fc.entries()-before)
	}
	// A node never proposes above its own level, leading or not.
	if err := n3.srv.gateLevel(&fsm.SetClusterSecret{}); err == nil || !strings.Contains(err.Error(), "member n3 is this node, at level 1") {
		t.Fatalf("n3's own gate: %v", err)
	}
	// Entries of the release before pass.
	s := n1.open(t, "lv")
	if _, err := n1.request(testCtx(t), s, "lv", 1, "x"); err != nil {
		t.Fatal(err)
	}

	// n3 is upgraded.
	n3.srv.levels.own.Store(fsm.ProtocolLevel)
	fc.waitSecret()
	if n := fc.secretEntries(); n != 1 {
		t.Fatalf("%d SetClusterSecret entries, want 1", n)
	}
	if st, err := n1.clus.Status(testCtx(t), &pb.StatusRequest{}); err != nil || st.ClusterLevel != fsm.ProtocolLevel {
		t.Fatalf("the leader's status after the upgrade: %v, %v", st, err)
	}
	for _, n := range fc.nodes {
		if v := snapVersion(t, n); v != 3 {
			t.Fatalf("%s writes snapshot format %d with the secret, want 3", n.id, v)
		}
		if n.m.UsedLevel() != fsm.LevelClusterSecret {
			t.Fatalf("%s: used level %d", n.id, n.m.UsedLevel())
		}
	}
}

// A member the leader has not heard from counts at the cluster's floor
// (levelFloor): here one in the configuration with no API address to
// probe, added after the secret was drawn, when the state already uses
// level 2. A new leader knows no member's level until its probes answer.
func TestGateCountsAnUnheardMemberAtTheFloor(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{configure: func(c *Config) { c.ProbeInterval = 5 * time.Millisecond }})
	n1 := fc.node("n1")
	typ := &fsm.SetClusterSecret{}
	eventually(t, "level 2 once every member answered", func() bool { return n1.srv.gateLevel(typ) == nil })
	fc.waitSecret()
	fc.log.mu.Lock()
	fc.log.extra = append(fc.log.extra, raftnode.Member{ID: "n4", Addr: "raft-n4", Suffrage: "Nonvoter"})
	fc.log.mu.Unlock()
	if err := n1.srv.gateLevel(typ); err != nil {
		t.Fatalf("with a member never heard from, in a cluster whose state uses level 2: %v", err)
	}
	if ls := levelsSeen(t, fc, "n1"); ls["n4"] != 0 || ls["n2"] != fsm.ProtocolLevel {
		t.Fatalf("members' levels: %v; want n4 unknown (0)", ls)
	}
	fc.log.mu.Lock()
	fc.log.extra = nil
	fc.log.mu.Unlock()

	// A follower knows no cluster level: its gate leaves the decision to
	// the leader's (raft refuses a follower's proposal, and the call is
	// forwarded).
	n2 := fc.node("n2")
	if err := n2.srv.gateLevel(typ); err != nil {
		t.Fatalf("a follower's gate: %v", err)
	}
	var nl *raftnode.NotLeaderError
	if _, _, err := n2.srv.propose(testCtx(t), &fsm.SetClusterSecret{Secret: strings.Repeat("s", 32)}); !errors.As(err, &nl) {
		t.Fatalf("a follower's proposal: %v; want not the leader", err)
	}
	if st, err := n2.clus.Status(testCtx(t), &pb.StatusRequest{}); err != nil || st.ClusterLevel != 0 || st.ProtocolLevel != fsm.ProtocolLevel {
		t.Fatalf("a follower's status: %v, %v", st, err)
	}

	fc.elect("n2")
	eventually(t, "n2 hears every member", func() bool { return n2.srv.gateLevel(typ) == nil })
	if n := fc.secretEntries(); n != 1 {
		t.Fatalf("%d SetClusterSecret entries, want 1: a new leader keeps the secret", n)
	}
}

// The floor at which a member not heard from counts: the release before's
// level, unless the state already uses a newer one or this node
// bootstrapped the cluster with a newer release; never above this node's
// own level.
func TestLevelFloor(t *testing.T) {
	withSecret := fsm.New()
	if ap := withSecret.Apply(1, fsm.Entry{Cmd: &fsm.SetClusterSecret{Secret: strings.Repeat("s", 32)}}); ap.Result.Err != nil {
		t.Fatal(ap.Result.Err)
	}
	withRecord := fsm.New()
	for i, c := range []fsm.Command{
		&fsm.OpenSession{Namespace: "ns", TTL: 10e9},
		&fsm.Request{Session: 1, Namespace: "ns", RequestID: 1, Names: []string{"a"}},
		&fsm.SetRecord{Session: 1, Namespace: "ns", RequestID: 1, Token: 2, Name: "a", Value: []byte("v")},
	} {
		if ap := withRecord.Apply(uint64(i+1), fsm.Entry{Cmd: c}); ap.Result.Err != nil {
			t.Fatal(ap.Result.Err)
		}
	}
	for _, c := range []struct {
		name           string
		m              *fsm.Machine
		bootstrap, own int
		probedOnce     bool
		want           int
		why            string
	}{
		{"an upgraded cluster, before the secret", fsm.New(), 0, 0, true, fsm.PreviousLevel, ""},
		{"a cluster this release bootstrapped", fsm.New(), fsm.LevelClusterSecret, 0, true, fsm.LevelClusterSecret, "the release that bootstrapped this cluster"},
		{"... before the term's first probe round ends", fsm.New(), fsm.LevelClusterSecret, 0, false, fsm.PreviousLevel, "the first round is under way"},
		{"a state that holds the secret", withSecret, 0, 0, true, fsm.LevelClusterSecret, "already uses it"},
		// Finding 8: records are not refused while a member is down.
		{"a state that holds a record, before the first round", withRecord, 0, 0, false, fsm.LevelRecords, "already uses it"},
		{"never above this node's own level", fsm.New(), fsm.LevelClusterSecret, fsm.PreviousLevel, true, fsm.PreviousLevel, "this node's"},
	} {
		s := &Server{m: c.m, cfg: Config{BootstrapLevel: c.bootstrap}}
		s.levels.init(c.own)
		got, why := s.levelFloor(c.probedOnce)
		if got != c.want || c.why == "" && why != "" || !strings.Contains(why, c.why) {
			t.Errorf("%s: floor %d (%q), want %d (%q)", c.name, got, why, c.want, c.why)
		}
	}
}

// A cluster this release bootstrapped holds a member of the release
// before only if an operator added one (a downgrade: the leader may have
// drawn the secret before it heard it, and warns). A member heard at
// level 1 counts at level 1 all the same: nothing newer is proposed.
func TestGateHearsAnOldMemberOfANewCluster(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{configure: func(c *Config) {
		c.ProbeInterval = 5 * time.Millisecond
		c.BootstrapLevel = fsm.ProtocolLevel
		if c.Self.ID == "n3" {
			c.ProtocolLevel = fsm.PreviousLevel
		}
	}})
	n1 := fc.node("n1")
	eventually(t, "the leader hears n3 at level 1", func() bool { return levelsSeen(t, fc, "n1")["n3"] == fsm.PreviousLevel })
	var le *levelError
	if err := n1.srv.gateLevel(&fsm.SetClusterSecret{}); !errors.As(err, &le) || le.lowest != "n3" || le.level != fsm.PreviousLevel {
		t.Fatalf("the gate with n3 heard at level 1: %v", err)
	}
}

// A Status answer without a level comes from a release before levels.
func TestReportedLevel(t *testing.T) {
	if l := reportedLevel(&pb.StatusResponse{}); l != fsm.PreviousLevel {
		t.Fatalf("no level reported: %d, want %d", l, fsm.PreviousLevel)
	}
	if l := reportedLevel(&pb.StatusResponse{ProtocolLevel: 7}); l != 7 {
		t.Fatalf("level 7 reported: %d", l)
	}
}

func errorInfo(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

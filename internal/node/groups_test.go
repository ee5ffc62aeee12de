package node_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/node"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
	"github.com/lockcluster/lockcluster/internal/testutil"
	"github.com/lockcluster/lockcluster/raftnode"
)

// groupNamespaces returns, for each of groups groups, a namespace that
// the static spread puts in it (slot·G/4096 = g: contiguous ranges).
func groupNamespaces(groups int) []string {
	out := make([]string, groups)
	found := 0
	for i := 0; found < groups; i++ {
		ns := fmt.Sprintf("ns-%d", i)
		g := int(fsm.Slot(ns)) * groups / fsm.Slots
		if out[g] == "" {
			out[g] = ns
			found++
		}
	}
	return out
}

// lockOnce opens a session in ns on cc, takes lock "x" and releases it,
// and returns the session id and the grant's token.
func lockOnce(t *testing.T, lc pb.LocksClient, ns string, rid uint64) (session, token uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var s *pb.OpenSessionResponse
	var err error
	for ctx.Err() == nil { // a node that lost its leader answers retryably
		if s, err = lc.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: ns, Ttl: durationpb.New(time.Minute)}); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("open a session in %s: %v", ns, err)
	}
	var r *pb.LockResponse
	for ctx.Err() == nil {
		if r, err = lc.Request(ctx, &pb.LockRequest{Namespace: ns, SessionId: s.SessionId, SessionSecret: s.Secret, RequestId: rid, Names: []string{"x"}}); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || r.Status != pb.Status_STATUS_GRANTED {
		t.Fatalf("lock x in %s: %v %v", ns, r, err)
	}
	if _, err := lc.Release(ctx, &pb.ReleaseRequest{Namespace: ns, SessionId: s.SessionId, SessionSecret: s.Secret, RequestId: rid, Token: r.Token}); err != nil {
		t.Fatalf("release x in %s: %v", ns, err)
	}
	return s.SessionId, r.Token
}

// A cluster of four groups (issue 27 phase 3): every node's replicas show
// the 4,096 slots spread, 1,024 to a group, each group's log in its own
// directory; a namespace of each group is served, and its session id
// carries its group (the fsm's move tests show that an Import lifts the
// group's tokens above the source's Freeze: groups.md I2). With the
// leader of one group stopped,
// every namespace is served again, its tokens still growing.
func TestGroupsSpreadAndServe(t *testing.T) {
	const groups = 4
	c := nodetest.Start(t, 3, nodetest.Options{Quiet: true, Groups: groups})
	for i, nd := range c.Nodes {
		for g := 0; g < groups; g++ {
			if got := nd.GroupMachine(g).OwnedSlots(); got != fsm.Slots/groups {
				t.Errorf("node %d group %d owns %d slots, want %d", i, g, got, fsm.Slots/groups)
			}
		}
	}
	if dir := c.Nodes[0].GroupRaft(3).LogDir(); !strings.Contains(dir, filepath.Join("groups", "g3", "raft")) {
		t.Errorf("group 3's log is in %s, want DataDir/groups/g3/raft/...", dir)
	}
	names := groupNamespaces(groups)
	lc := pb.NewLocksClient(rawConn(t, c.Nodes[1].GRPCAddr()))
	tokens := make([]uint64, groups)
	for g, ns := range names {
		id, token := lockOnce(t, lc, ns, 1)
		if int(id>>48) != g {
			t.Errorf("a session of %s (group %d) has id %#x: want group %d in its top 16 bits", ns, g, id, g)
		}
		tokens[g] = token
	}
	// The lock and session series cover every group: a namespace of
	// group 3 has its open session and its grant on every node.
	for _, nd := range c.Nodes {
		c.WaitFor(10*time.Second, "node's metrics of group 3's namespace", func() bool {
			body := scrapeText(t, "http://"+nd.HTTPAddr()+"/metrics")
			return hasSeries(body, "lockcluster_sessions{", names[3]) && hasSeries(body, "lockcluster_grants_total{", names[3])
		})
	}
	// Stop the node that leads group 2 (whatever else it leads).
	leader := -1
	c.WaitFor(10*time.Second, "a leader of group 2", func() bool {
		for i, nd := range c.Nodes {
			if nd.GroupRaft(2).IsLeader() {
				leader = i
				return true
			}
		}
		return false
	})
	c.Stop(leader)
	other := c.Nodes[(leader+1)%3]
	lc = pb.NewLocksClient(rawConn(t, other.GRPCAddr()))
	for g, ns := range names {
		_, token := lockOnce(t, lc, ns, 10)
		if token <= tokens[g] {
			t.Errorf("group %d: token %d after the failover, %d before: tokens of a namespace only grow", g, token, tokens[g])
		}
	}
	c.Restart(leader)
	c.WaitFor(20*time.Second, "the restarted node to see the spread", func() bool { return c.Nodes[leader].SpreadDone() })
}

// A node of several groups takes no joins yet, and says so.
func TestGroupsRefuseAJoin(t *testing.T) {
	_, err := node.Start(node.Config{ID: "n", DataDir: t.TempDir(), GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:0", Join: "127.0.0.1:1", Groups: 2})
	if err == nil || !strings.Contains(err.Error(), "cannot join a cluster of several groups") {
		t.Fatalf("join with 2 groups: %v", err)
	}
	_, err = node.Start(node.Config{ID: "n", DataDir: t.TempDir(), GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:0", Groups: node.MaxGroups + 1})
	if err == nil || !strings.Contains(err.Error(), "groups 33") {
		t.Fatalf("33 groups: %v", err)
	}
}

// A data directory keeps the number of groups it was made with: a node
// restarted with another refuses to start, naming both, rather than
// bootstrap new groups beside the old ones or leave some unserved.
func TestGroupsCountIsKept(t *testing.T) {
	dir := t.TempDir()
	start := func(groups int) (*node.Node, error) {
		return node.Start(node.Config{ID: "n", DataDir: dir, GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:0",
			Bootstrap: []raftnode.Peer{{ID: "n"}}, Groups: groups})
	}
	nd, err := start(2)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the spread", nd.SpreadDone)
	closeNode(t, nd)
	for _, g := range []int{1, 3} {
		if _, err := start(g); err == nil || !strings.Contains(err.Error(), "holds a cluster of 2 group(s)") {
			t.Fatalf("restart with %d groups: %v", g, err)
		}
	}
	nd, err = start(2)
	if err != nil {
		t.Fatal(err)
	}
	closeNode(t, nd)
}

func closeNode(t *testing.T, nd *node.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := nd.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func scrapeText(t *testing.T, url string) string {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

// hasSeries reports whether a line of the scrape body starts with name
// and labels namespace ns.
func hasSeries(body, name, ns string) bool {
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, name) && strings.Contains(l, `namespace="`+ns+`"`) {
			return true
		}
	}
	return false
}

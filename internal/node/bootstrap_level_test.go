package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/node"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
	"github.com/lockcluster/lockcluster/internal/proccluster"
	"github.com/lockcluster/lockcluster/internal/testutil"
	"github.com/lockcluster/lockcluster/raftnode"
)

// Issue 25's last gap: a new cluster of three voters of which one never
// started. The two that did elect a leader, and the leader draws the
// cluster secret without waiting for the third (the release that
// bootstrapped the cluster is its floor: a member not heard from counts at
// this release's level, not the release before's). From then on a
// stranger's Cluster.Touch is refused; before the fix the secret waited
// for the silent member, and Touch was open to anyone meanwhile.
func TestNewClusterDrawsTheSecretWithAMemberThatNeverStarted(t *testing.T) {
	dir := t.TempDir()
	peers := make([]raftnode.Peer, 3)
	for i := range peers {
		addr, err := proccluster.FreeAddr("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		peers[i] = raftnode.Peer{ID: "b" + string(rune('0'+i)), Addr: addr}
	}
	var nodes []*node.Node
	for i := range 2 { // b2 never starts
		cfg := node.Config{ID: peers[i].ID, DataDir: dir + "/" + peers[i].ID, GRPCAddr: "127.0.0.1:0", RaftAddr: peers[i].Addr,
			Bootstrap: peers, Logger: testutil.Logger(t, peers[i].ID, hclog.Info)}
		nd, err := node.Start(cfg)
		if err != nil {
			t.Fatalf("starting %s: %v", peers[i].ID, err)
		}
		t.Cleanup(func() { _ = nd.Close(context.Background()) })
		nodes = append(nodes, nd)
		if got := nd.Raft().BootstrapStamp(); got != fsm.ProtocolLevel {
			t.Fatalf("%s stored bootstrap stamp %d, want this release's level %d", peers[i].ID, got, fsm.ProtocolLevel)
		}
	}
	testutil.Eventually(t, 20*time.Second, "the cluster secret on both started members", func() bool {
		for _, nd := range nodes {
			if nd.Machine().ClusterSecret() == "" {
				return false
			}
		}
		return true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, nd := range nodes {
		_, err := pb.NewClusterClient(rawConn(t, nd.GRPCAddr())).Touch(ctx, &pb.TouchRequest{SessionIds: []uint64{1}})
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("a stranger's Touch on %s: %v; want PermissionDenied", nd.ID(), err)
		}
	}
}

// Only a node that bootstrapped its cluster holds the stamp: one that was
// joined claims nothing of the cluster's creation.
func TestOnlyTheBootstrappingNodeHoldsTheStamp(t *testing.T) {
	cl := nodetest.Start(t, 2, nodetest.Options{Quiet: true})
	if got := cl.Nodes[0].Raft().BootstrapStamp(); got != fsm.ProtocolLevel {
		t.Fatalf("the bootstrapping node's stamp: %d, want %d", got, fsm.ProtocolLevel)
	}
	if got := cl.Nodes[1].Raft().BootstrapStamp(); got != 0 {
		t.Fatalf("the joined node's stamp: %d, want 0", got)
	}
	cl.Stop(0)
	cl.Restart(0)
	if got := cl.Nodes[0].Raft().BootstrapStamp(); got != fsm.ProtocolLevel {
		t.Fatalf("the stamp after a restart: %d, want %d", got, fsm.ProtocolLevel)
	}
}

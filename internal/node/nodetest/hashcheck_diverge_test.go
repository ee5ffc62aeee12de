//go:build divergencetest

package nodetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/node"
)

// A replica that applied something the others did not (planted by the
// divergencetest build) is caught by the comparison every cluster makes
// when its test ends: hashes differ at the common index, and the node
// says it fenced itself.
//
// Run: go test -race -tags hashicorpmetrics,divergencetest -run Diverge ./internal/node/nodetest/
func TestHashCheckCatchesPlantedDivergence(t *testing.T) {
	t.Setenv(plantEnv, "node2:30")
	c := Start(t, 3, Options{Quiet: true, Node: func(cfg *node.Config) { cfg.Raft.CheckpointInterval = 50 * time.Millisecond }})
	if c.hashCheck {
		t.Fatalf("a cluster whose test sets %s compares hashes at its end", plantEnv)
	}
	leader := c.WaitLeader(10 * time.Second)
	if leader == 2 {
		t.Skip("the planted node leads; this test needs it as a follower")
	}
	cc, err := grpc.NewClient(c.Nodes[leader].GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for c.Nodes[leader].Raft().LastIndex() < 40 {
		if _, err := pb.NewLocksClient(cc).OpenSession(ctx, &pb.OpenSessionRequest{Namespace: "ns"}); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitFor(20*time.Second, "node2 to fence itself", func() bool { return c.Nodes[2].Raft().Diverged() != nil })

	c.compareRunning(hashCatchUp)
	r := c.hashReport()
	if !strings.Contains(r, "node2 fenced itself") || !strings.Contains(r, "at index ") {
		t.Fatalf("the comparison did not catch the planted divergence: %q", r)
	}
	t.Log(r)
	c.mu.Lock()
	c.diverged = nil // this test's own cleanup need not fail
	c.mu.Unlock()
}

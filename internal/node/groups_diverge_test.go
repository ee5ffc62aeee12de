//go:build divergencetest

package node_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/node"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
)

// A replica of one group that diverges (planted on node2's replica of
// group 2) fences that group only (groups.md §10.5): node2 answers
// REPLICA_DIVERGED for a namespace of group 2, serves one of group 1,
// and its /readyz names the group.
//
// Run: go test -race -tags hashicorpmetrics,divergencetest -run PlantedDivergence ./internal/node/
func TestPlantedDivergenceFencesOneGroup(t *testing.T) {
	t.Setenv("LOCKCLUSTER_TEST_DIVERGE", "node2/2:30")
	c := nodetest.Start(t, 3, nodetest.Options{Quiet: true, Groups: 4, Node: func(cfg *node.Config) {
		cfg.Raft.CheckpointInterval = 50 * time.Millisecond
	}})
	n2 := c.Nodes[2]
	names := groupNamespaces(4)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	on2 := pb.NewLocksClient(rawConn(t, n2.GRPCAddr()))
	c.WaitFor(30*time.Second, "node2's replica of group 2 to fence itself", func() bool { return n2.GroupRaft(2).Diverged() != nil })
	if err := n2.GroupRaft(1).Unfit(); err != nil {
		t.Fatalf("node2's replica of group 1: %v", err)
	}

	_, err := on2.Query(ctx, &pb.QueryRequest{Namespace: names[2]})
	st, _ := status.FromError(err)
	if st.Code() != codes.Unavailable || reason(st) != pb.ErrorReason_REPLICA_DIVERGED.String() {
		t.Fatalf("Query of group 2 on node2: %v (reason %q): want REPLICA_DIVERGED", err, reason(st))
	}
	if _, err := on2.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: names[1], Ttl: durationpb.New(time.Minute)}); err != nil {
		t.Fatalf("OpenSession of group 1 on node2: %v: the other groups serve", err)
	}
	if code, body := get(t, "http://"+n2.HTTPAddr()+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "group 2") {
		t.Errorf("/readyz on node2: %d %s: want 503 naming group 2", code, body)
	}
}

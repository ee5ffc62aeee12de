//go:build divergencetest

package node_test

import (
	"context"
	"encoding/json"

	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/node"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

type digest struct {
	AppliedIndex uint64 `json:"applied_index"`
	AppliedHash  string `json:"applied_hash"`
	Diverged     string `json:"diverged"`
	AtHash       string `json:"at_hash"`
	AtError      string `json:"at_error"`
}

func getDigest(t *testing.T, n *node.Node, at uint64) digest {
	t.Helper()
	url := "http://" + n.HTTPAddr() + "/debug/digest"
	if at > 0 {
		url += "?at=" + strconv.FormatUint(at, 10)
	}
	code, body := get(t, url)
	var d digest
	if code != 200 || json.Unmarshal([]byte(body), &d) != nil {
		t.Fatalf("%s: %d %s", url, code, body)
	}
	return d
}

// A replica that applied something the others did not (planted with the
// divergencetest build tag) fences itself at the next checkpoint: every
// lockcluster.v1 call on it fails Unavailable with reason
// REPLICA_DIVERGED, its open session streams end, /readyz is 503, gRPC
// health says NOT_SERVING, lockcluster_replica_diverged is 1, and
// /debug/digest shows the mismatch. The other nodes go on serving.
//
// Run: go test -race -tags hashicorpmetrics,divergencetest -run Diverge ./internal/node/
func TestPlantedDivergenceFencesTheNode(t *testing.T) {
	t.Setenv("LOCKCLUSTER_TEST_DIVERGE", "node2:40")
	c := nodetest.Start(t, 3, nodetest.Options{Quiet: true, Node: func(cfg *node.Config) {
		cfg.Raft.CheckpointInterval = 50 * time.Millisecond
	}})
	leader := c.WaitLeader(10 * time.Second)
	if leader == 2 {
		t.Skip("the planted node leads; this test needs it as a follower") // node0 bootstraps and leads at start
	}
	n2 := c.Nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dial := func(n *node.Node) pb.LocksClient {
		cc, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return pb.NewLocksClient(cc)
	}
	on2, onLeader := dial(n2), dial(c.Nodes[leader])

	// A session stream attached to node2 before the divergence.
	open, err := on2.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := on2.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.SessionUp{Kind: &pb.SessionUp_Attach{Attach: &pb.Attach{Namespace: "ns", SessionId: open.SessionId, MinIndex: open.Index, SessionSecret: open.Secret}}}); err != nil {
		t.Fatal(err)
	}

	for c.Nodes[leader].Raft().LastIndex() < 50 {
		if _, err := onLeader.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: "ns"}); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitFor(20*time.Second, "node2 to fence itself", func() bool { return n2.Raft().Diverged() != nil })

	_, err = on2.Query(ctx, &pb.QueryRequest{Namespace: "ns"})
	st, _ := status.FromError(err)
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "diverged") || reason(st) != pb.ErrorReason_REPLICA_DIVERGED.String() {
		t.Fatalf("Query on the fenced node: %v (reason %q)", err, reason(st))
	}
	c.WaitFor(10*time.Second, "node2's open stream to end", func() bool {
		_, err := stream.Recv()
		st, _ := status.FromError(err)
		return err != nil && st.Code() == codes.Unavailable
	})
	if code, body := get(t, "http://"+n2.HTTPAddr()+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "diverged") {
		t.Errorf("/readyz on the fenced node: %d %s", code, body)
	}

	// Status alone answers on it, saying why; the leader's probes carry
	// that into Members and the status page, with node2 reachable (not
	// "unreachable for 12s").
	clus := func(n *node.Node) pb.ClusterClient {
		cc, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return pb.NewClusterClient(cc)
	}
	if st, err := clus(n2).Status(ctx, &pb.StatusRequest{}); err != nil || !strings.Contains(st.Unfit, "diverged") {
		t.Fatalf("Status on the fenced node: %v, %v: want it to answer, unfit naming the divergence", st, err)
	}
	if _, err := clus(n2).Members(ctx, &pb.MembersRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("Members on the fenced node: %v: want Unavailable", err)
	}
	c.WaitFor(10*time.Second, "the leader to see node2 fenced", func() bool {
		r, err := clus(c.Nodes[leader]).Members(ctx, &pb.MembersRequest{})
		if err != nil {
			return false
		}
		for _, m := range r.Members {
			if m.Id == n2.ID() {
				return m.Probed && m.Reachable && strings.Contains(m.Unfit, "diverged")
			}
		}
		return false
	})
	var page struct {
		Members []struct {
			ID     string `json:"id"`
			Health *struct {
				Reachable bool   `json:"reachable"`
				Unfit     string `json:"unfit"`
			} `json:"health"`
		} `json:"members"`
	}
	_, body := get(t, "http://"+c.Nodes[leader].HTTPAddr()+"/api/state")
	if err := json.Unmarshal([]byte(body), &page); err != nil {
		t.Fatalf("the leader's /api/state: %v: %s", err, body)
	}
	for _, m := range page.Members {
		if fenced := m.Health != nil && m.Health.Reachable && strings.Contains(m.Health.Unfit, "diverged"); fenced != (m.ID == n2.ID()) {
			t.Errorf("the leader's status page shows %s with health %+v", m.ID, m.Health)
		}
	}
	hc, err := grpc.NewClient(n2.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	c.WaitFor(5*time.Second, "health NOT_SERVING on the fenced node", func() bool {
		r, err := healthpb.NewHealthClient(hc).Check(ctx, &healthpb.HealthCheckRequest{Service: "lockcluster.v1.Locks"})
		return err == nil && r.Status == healthpb.HealthCheckResponse_NOT_SERVING
	})
	if _, body := get(t, "http://"+n2.HTTPAddr()+"/metrics"); !strings.Contains(body, "lockcluster_replica_diverged 1") {
		t.Error("the fenced node's metrics do not say lockcluster_replica_diverged 1")
	}
	if _, body := get(t, "http://"+c.Nodes[leader].HTTPAddr()+"/metrics"); !strings.Contains(body, "lockcluster_replica_diverged 0") {
		t.Error("the leader's metrics do not say lockcluster_replica_diverged 0")
	}

	// The digests show it, at a common index, for good.
	d2 := getDigest(t, n2, 0)
	if d2.Diverged == "" {
		t.Error("/debug/digest of the fenced node does not say it diverged")
	}
	at := d2.AppliedIndex
	dl, d2at := getDigest(t, c.Nodes[leader], at), getDigest(t, n2, at)
	if dl.AtHash == "" || d2at.AtHash == "" || dl.AtHash == d2at.AtHash {
		t.Errorf("hashes at %d: leader %q (%s), node2 %q (%s): want two different known values", at, dl.AtHash, dl.AtError, d2at.AtHash, d2at.AtError)
	}

	// The others serve.
	if _, err := onLeader.Query(ctx, &pb.QueryRequest{Namespace: "ns"}); err != nil {
		t.Fatalf("Query on the leader: %v", err)
	}
}

func reason(st *status.Status) string {
	for _, d := range st.Details() {
		var info *errdetails.ErrorInfo
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			info = i
		}
		if info != nil {
			return info.Reason
		}
	}
	return ""
}

package node_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/auth"
	"github.com/lockcluster/lockcluster/internal/node"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
	"github.com/lockcluster/lockcluster/internal/testutil"
)

// A stranger's forwarding marks are not honoured. With auth off, its
// steal marked as forwarded by a node is audited all the same (a node's
// forwarded call is audited on the node the client called, and the leader
// does not audit it again). With auth on, an admin token that relays a
// call without being a member acts for nobody: it cannot release another
// session's lock without that session's secret, as a node relaying an
// admin's call could.
func TestStrangerForwardingMarksAreNotHonoured(t *testing.T) {
	marks := []string{"lockcluster-forwarded", "node9", "lockcluster-admin-caller", "1"}
	start := func(t *testing.T, authOn bool) (*nodetest.Cluster, pb.LocksClient, *testutil.Buffer) {
		logs := &testutil.Buffer{}
		cl := nodetest.Start(t, 1, nodetest.Options{Quiet: true, Node: func(cfg *node.Config) {
			cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "lockcluster", Output: logs, Level: hclog.Info, JSONFormat: true})
			if authOn {
				cfg.Auth = auth.Config{AdminTokens: []string{strangerAdmin}, Namespaces: map[string]auth.Namespace{"ns": {Tokens: []string{strangerUser}}}}
			}
		}})
		return cl, pb.NewLocksClient(rawConn(t, cl.Addrs()[0])), logs
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	as := func(token string, marks ...string) context.Context {
		if token != "" {
			marks = append([]string{"authorization", "Bearer " + token}, marks...)
		}
		return metadata.NewOutgoingContext(ctx, metadata.Pairs(marks...))
	}
	open := func(t *testing.T, lc pb.LocksClient, token, label string) *pb.OpenSessionResponse {
		s, err := lc.OpenSession(as(token), &pb.OpenSessionRequest{Namespace: "ns", Label: label, Ttl: durationpb.New(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	t.Run("auth off: a marked steal is audited", func(t *testing.T) {
		cl, lc, logs := start(t, false)
		alice, bob := open(t, lc, "", "alice"), open(t, lc, "", "bob")
		if _, err := lc.Request(ctx, &pb.LockRequest{Namespace: "ns", SessionId: alice.SessionId, SessionSecret: alice.Secret, RequestId: 1, Names: []string{"x"}}); err != nil {
			t.Fatal(err)
		}
		if r, err := lc.Request(as("", marks...), &pb.LockRequest{Namespace: "ns", SessionId: bob.SessionId, SessionSecret: bob.Secret, RequestId: 1, Names: []string{"x"}, Steal: true}); err != nil || r.Status != pb.Status_STATUS_GRANTED {
			t.Fatalf("steal: %v, %v", r, err)
		}
		cl.WaitFor(5*time.Second, "the steal in the audit log", func() bool {
			for _, l := range strings.Split(logs.String(), "\n") {
				var m map[string]any
				if json.Unmarshal([]byte(l), &m) == nil && m["@message"] == "audit" && m["event"] == "steal" {
					return true
				}
			}
			return false
		})
		if secret := cl.Nodes[0].Machine().ClusterSecret(); secret == "" || strings.Contains(logs.String(), auth.MemberSecretValue(secret)) {
			t.Fatalf("no cluster secret (%v), or the log holds it", secret == "")
		}
	})

	t.Run("auth on: a non-member's relay acts for nobody", func(t *testing.T) {
		_, lc, _ := start(t, true)
		alice := open(t, lc, strangerUser, "alice")
		if _, err := lc.Request(as(strangerUser), &pb.LockRequest{Namespace: "ns", SessionId: alice.SessionId, SessionSecret: alice.Secret, RequestId: 1, Names: []string{"x"}}); err != nil {
			t.Fatal(err)
		}
		_, err := lc.Release(as(strangerAdmin, marks...), &pb.ReleaseRequest{Namespace: "ns", SessionId: alice.SessionId, RequestId: 1})
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("a non-member's relayed admin release without the session's secret: %v, want PermissionDenied", err)
		}
		// Unmarked, the admin token is an admin's own credential.
		if _, err := lc.Release(as(strangerAdmin), &pb.ReleaseRequest{Namespace: "ns", SessionId: alice.SessionId, RequestId: 1}); err != nil {
			t.Fatalf("the admin's own release: %v", err)
		}
	})
}

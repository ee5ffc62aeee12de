package node_test

import (
	"context"
	"encoding/base64"
	"encoding/hex"
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

// The audit log has one line for a steal, for a release, an abort and a
// session close made with an admin credential, and for each refused
// credential (a wrong token, none, a wrong session secret, on a call and on
// the session stream), with the namespace and the session's label; and no
// line holds a token or a secret (issue 11).
func TestAuditLog(t *testing.T) {
	const (
		admin = "admin-token-0123456789abcdef"
		user  = "user-token-0123456789abcdef"
		wrong = "wrong-token-0123456789abcdef"
	)
	logs := &testutil.Buffer{}
	c := nodetest.Start(t, 1, nodetest.Options{Quiet: true, Node: func(cfg *node.Config) {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "lockcluster", Output: logs, Level: hclog.Info, JSONFormat: true})
		cfg.Auth = auth.Config{AdminTokens: []string{admin}, Namespaces: map[string]auth.Namespace{"ns": {Tokens: []string{user}}}}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc := rawConn(t, c.Addrs()[0])
	var err error
	lc := pb.NewLocksClient(cc)
	as := func(token string) context.Context {
		if token == "" {
			return ctx
		}
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	open := func(label string) *pb.OpenSessionResponse {
		s, err := lc.OpenSession(as(user), &pb.OpenSessionRequest{Namespace: "ns", Label: label, Ttl: durationpb.New(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	alice, bob := open("alice"), open("bob")
	if _, err := lc.Request(as(user), &pb.LockRequest{Namespace: "ns", SessionId: alice.SessionId, SessionSecret: alice.Secret, RequestId: 1, Names: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	// A steal, by bob.
	stolen, err := lc.Request(as(user), &pb.LockRequest{Namespace: "ns", SessionId: bob.SessionId, SessionSecret: bob.Secret, RequestId: 1, Names: []string{"x"}, Steal: true})
	if err != nil || stolen.Status != pb.Status_STATUS_GRANTED {
		t.Fatalf("steal: %v, %v", stolen, err)
	}
	// An operator writes the record of bob's lock, ends his lock and
	// request, and alice's session.
	if _, err := lc.SetRecord(as(admin), &pb.SetRecordRequest{Namespace: "ns", SessionId: bob.SessionId, RequestId: 1, Token: stolen.Token, Name: "x", Value: []byte("fixed")}); err != nil {
		t.Fatalf("admin record write: %v", err)
	}
	if _, err := lc.Release(as(admin), &pb.ReleaseRequest{Namespace: "ns", SessionId: bob.SessionId, RequestId: 1}); err != nil {
		t.Fatalf("admin release: %v", err)
	}
	if _, err := lc.Abort(as(admin), &pb.AbortRequest{Namespace: "ns", SessionId: bob.SessionId, RequestId: 1}); err != nil {
		t.Fatalf("admin abort: %v", err)
	}
	if _, err := lc.CloseSession(as(admin), &pb.CloseSessionRequest{Namespace: "ns", SessionId: alice.SessionId}); err != nil {
		t.Fatalf("admin close: %v", err)
	}
	// Refusals: a wrong token, no token, a wrong session secret, and a
	// session stream with a wrong token. A release by the namespace's own
	// credential with the right secret is not audited.
	refuse := func(what string, err error) {
		t.Helper()
		if c := status.Code(err); c != codes.PermissionDenied && c != codes.Unauthenticated {
			t.Fatalf("%s: %v, want a refusal", what, err)
		}
	}
	_, err = lc.Request(as(wrong), &pb.LockRequest{Namespace: "ns", SessionId: bob.SessionId, SessionSecret: bob.Secret, RequestId: 2, Names: []string{"y"}})
	refuse("wrong token", err)
	_, err = lc.Query(as(""), &pb.QueryRequest{Namespace: "ns"})
	refuse("no token", err)
	_, err = lc.Request(as(user), &pb.LockRequest{Namespace: "ns", SessionId: bob.SessionId, SessionSecret: []byte("not-the-secret-0123456789"), RequestId: 3, Names: []string{"y"}})
	refuse("wrong secret", err)
	st, err := lc.Session(as(wrong))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Attach{Attach: &pb.Attach{Namespace: "ns", SessionId: bob.SessionId, SessionSecret: bob.Secret}}}); err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	refuse("stream with a wrong token", err)
	if _, err := lc.Request(as(user), &pb.LockRequest{Namespace: "ns", SessionId: bob.SessionId, SessionSecret: bob.Secret, RequestId: 4, Names: []string{"z"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Release(as(user), &pb.ReleaseRequest{Namespace: "ns", SessionId: bob.SessionId, SessionSecret: bob.Secret, RequestId: 4}); err != nil {
		t.Fatal(err)
	}

	type line map[string]any
	var lines []line
	read := func() {
		lines = nil
		for _, l := range strings.Split(logs.String(), "\n") {
			var m line
			if json.Unmarshal([]byte(l), &m) == nil && m["@message"] == "audit" {
				lines = append(lines, m)
			}
		}
	}
	// The stream's refusal is logged when its handler returns, which may
	// be just after the client saw it.
	c.WaitFor(5*time.Second, "the stream's refusal in the audit log", func() bool {
		read()
		for _, l := range lines {
			if l["method"] == "/lockcluster.v1.Locks/Session" {
				return true
			}
		}
		return false
	})
	count := map[string]int{}
	for _, l := range lines {
		ev, _ := l["event"].(string)
		count[ev]++
		if !strings.HasSuffix(l["@module"].(string), ".audit") {
			t.Errorf("audit line on logger %v: %v", l["@module"], l)
		}
		if l["namespace"] != "ns" {
			t.Errorf("audit line without namespace ns: %v", l)
		}
		switch ev {
		case "steal":
			if l["client_label"] != "bob" || l["names"] == nil || l["credential"] != "bearer token" {
				t.Errorf("steal line: %v: want bob's label, the names, the kind of credential", l)
			}
		case "admin-close":
			if l["client_label"] != "alice" {
				t.Errorf("%s line: %v: want alice's label", ev, l)
			}
		case "admin-release", "admin-abort", "admin-set-record":
			if l["client_label"] != "bob" {
				t.Errorf("%s line: %v: want bob's label", ev, l)
			}
		}
	}
	want := map[string]int{"steal": 1, "admin-release": 1, "admin-abort": 1, "admin-set-record": 1, "admin-close": 1, "refused-credential": 4}
	for ev, n := range want {
		if count[ev] != n {
			t.Errorf("%d %s lines, want %d", count[ev], ev, n)
		}
	}
	if len(lines) != 9 {
		t.Errorf("%d audit lines, want 9", len(lines))
	}
	all := logs.String()
	for _, secret := range []string{admin, user, wrong, "not-the-secret", string(alice.Secret), string(bob.Secret),
		hex.EncodeToString(bob.Secret), base64.StdEncoding.EncodeToString(bob.Secret), base64.RawURLEncoding.EncodeToString(bob.Secret)} {
		if secret != "" && strings.Contains(all, secret) {
			t.Errorf("the log holds a credential: %q", secret)
		}
	}
	if t.Failed() || testing.Verbose() {
		for _, l := range lines {
			t.Log(l)
		}
	}
}

// A call the client makes to a follower is forwarded to the leader and
// audited once, by the follower, which saw the client: the leader does not
// log the forwarded copy (it would name the follower as the caller).
func TestAuditLogForwardedOnce(t *testing.T) {
	const (
		admin = "admin-token-0123456789abcdef"
		user  = "user-token-0123456789abcdef"
	)
	logs := &testutil.Buffer{}
	c := nodetest.Start(t, 3, nodetest.Options{Quiet: true, Node: func(cfg *node.Config) {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "lockcluster", Output: logs, Level: hclog.Info, JSONFormat: true})
		cfg.Auth = auth.Config{AdminTokens: []string{admin}, Namespaces: map[string]auth.Namespace{"ns": {Tokens: []string{user}}}}
	}})
	leader := c.WaitLeader(10 * time.Second)
	follower := c.Nodes[(leader+1)%len(c.Nodes)]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc := rawConn(t, follower.GRPCAddr())
	lc := pb.NewLocksClient(cc)
	as := func(token string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	s, err := lc.OpenSession(as(user), &pb.OpenSessionRequest{Namespace: "ns", Label: "carol", Ttl: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	// The follower names the session by its own applied state.
	c.WaitFor(5*time.Second, "the follower to apply the session", func() bool {
		_, ok := follower.Machine().Session(s.SessionId)
		return ok
	})
	if r, err := lc.Request(as(user), &pb.LockRequest{Namespace: "ns", SessionId: s.SessionId, SessionSecret: s.Secret, RequestId: 1, Names: []string{"x"}, Steal: true}); err != nil || r.Status != pb.Status_STATUS_GRANTED {
		t.Fatalf("steal through a follower: %v, %v", r, err)
	}
	if _, err := lc.Release(as(admin), &pb.ReleaseRequest{Namespace: "ns", SessionId: s.SessionId, RequestId: 1}); err != nil {
		t.Fatalf("admin release through a follower: %v", err)
	}
	_, err = lc.Request(as(user), &pb.LockRequest{Namespace: "ns", SessionId: s.SessionId, SessionSecret: []byte("not-the-secret-0123456789"), RequestId: 2, Names: []string{"y"}})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("wrong secret through a follower: %v", err)
	}
	count := map[string]int{}
	for _, l := range strings.Split(logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || m["@message"] != "audit" {
			continue
		}
		if m["node"] != follower.ID() {
			t.Errorf("audit line on node %v, not the follower the client called (%s): %v", m["node"], follower.ID(), m)
		}
		if m["client_label"] != "carol" {
			t.Errorf("audit line without the session's label: %v", m)
		}
		count[m["event"].(string)]++
	}
	if want := map[string]int{"steal": 1, "admin-release": 1, "refused-credential": 1}; !equalCounts(count, want) {
		t.Errorf("audit lines %v, want %v", count, want)
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

package node_test

import (
	"context"
	"crypto/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/node"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
)

// capCluster is a 3-node cluster with small replicated limits and a
// client per node.
type capCluster struct {
	t      *testing.T
	c      *nodetest.Cluster
	ctx    context.Context
	leader int
	lc     []pb.LocksClient
}

func newCapCluster(t *testing.T) *capCluster {
	lim := fsm.DefaultLimits()
	lim.MaxSessionsPerNamespace, lim.MaxPendingPerSession = 3, 1
	c := nodetest.Start(t, 3, nodetest.Options{Quiet: true, Node: func(cfg *node.Config) {
		cfg.Server.Limits = &lim
		cfg.Raft.CheckpointInterval, cfg.Raft.CheckpointEntries = time.Hour, 1<<40 // no checkpoint entries mid-test
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	cc := &capCluster{t: t, c: c, ctx: ctx, leader: c.WaitLeader(10 * time.Second)}
	for _, a := range c.Addrs() {
		conn := rawConn(t, a)
		cc.lc = append(cc.lc, pb.NewLocksClient(conn))
	}
	c.WaitFor(10*time.Second, "the limits in force and the hash chain anchored", func() bool {
		_, _, anchored := c.Nodes[cc.leader].Raft().AppliedHash()
		return anchored && c.Nodes[cc.leader].Machine().Limits().MaxPendingPerSession == 1
	})
	return cc
}

func (c *capCluster) open(ns string) *pb.OpenSessionResponse {
	c.t.Helper()
	s, err := c.lc[c.leader].OpenSession(c.ctx, &pb.OpenSessionRequest{Namespace: ns, Ttl: durationpb.New(10 * time.Minute)})
	if err != nil {
		c.t.Fatal(err)
	}
	return s
}

// logIndex is the leader's last log index: a refusal must leave it alone.
func (c *capCluster) logIndex() uint64 { return c.c.Nodes[c.leader].Raft().LastIndex() }

// settled waits until every node applied the leader's last entry.
func (c *capCluster) settled() {
	want := c.logIndex()
	c.c.WaitFor(10*time.Second, "every node to apply the log", func() bool {
		for _, n := range c.c.Nodes {
			if n.Raft().AppliedIndex() < want {
				return false
			}
		}
		return true
	})
}

// refused runs call on every node and checks it fails with code, the log
// untouched.
func (c *capCluster) refused(what string, code codes.Code, call func(pb.LocksClient) error) string {
	c.t.Helper()
	c.settled()
	before := c.logIndex()
	var msg string
	for i, lc := range c.lc {
		err := call(lc)
		if status.Code(err) != code {
			c.t.Errorf("%s via node %d: %v, want %s", what, i, err, code)
			continue
		}
		msg = status.Convert(err).Message()
	}
	if after := c.logIndex(); after != before {
		c.t.Errorf("%s: the refusals added %d log entries", what, after-before)
	}
	return msg
}

// A session is a capability: a release, abort or close naming another
// session's ids is refused, through any node, with one message whatever
// the reason, and the owner keeps its lock. No refusal reaches the log.
func TestForgedWritesAreRefusedBeforeTheLog(t *testing.T) {
	c := newCapCluster(t)
	owner, attacker := c.open("ns"), c.open("ns")
	if len(owner.Secret) < 16 {
		t.Fatalf("the session secret has %d bytes; want at least 128 bits", len(owner.Secret))
	}
	lr, err := c.lc[c.leader].Request(c.ctx, &pb.LockRequest{Namespace: "ns", SessionId: owner.SessionId, SessionSecret: owner.Secret, RequestId: 1, Names: []string{"x"}})
	if err != nil || lr.Status != pb.Status_STATUS_GRANTED {
		t.Fatalf("owner's request: %v %v", lr, err)
	}
	random := make([]byte, 32)
	rand.Read(random)
	var msgs []string
	for name, secret := range map[string][]byte{"no secret": nil, "the attacker's own secret": attacker.Secret, "a random secret": random} {
		msgs = append(msgs, c.refused("release with "+name, codes.PermissionDenied, func(lc pb.LocksClient) error {
			_, err := lc.Release(c.ctx, &pb.ReleaseRequest{Namespace: "ns", SessionId: owner.SessionId, SessionSecret: secret, RequestId: 1})
			return err
		}))
		msgs = append(msgs, c.refused("abort with "+name, codes.PermissionDenied, func(lc pb.LocksClient) error {
			_, err := lc.Abort(c.ctx, &pb.AbortRequest{Namespace: "ns", SessionId: owner.SessionId, SessionSecret: secret, RequestId: 1})
			return err
		}))
		msgs = append(msgs, c.refused("close with "+name, codes.PermissionDenied, func(lc pb.LocksClient) error {
			_, err := lc.CloseSession(c.ctx, &pb.CloseSessionRequest{Namespace: "ns", SessionId: owner.SessionId, SessionSecret: secret})
			return err
		}))
	}
	msgs = append(msgs, c.refused("a session that never existed", codes.PermissionDenied, func(lc pb.LocksClient) error {
		_, err := lc.Release(c.ctx, &pb.ReleaseRequest{Namespace: "ns", SessionId: 999_999, SessionSecret: owner.Secret, RequestId: 1})
		return err
	}))
	msgs = append(msgs, c.refused("the owner's secret in another namespace", codes.PermissionDenied, func(lc pb.LocksClient) error {
		_, err := lc.Release(c.ctx, &pb.ReleaseRequest{Namespace: "other", SessionId: owner.SessionId, SessionSecret: owner.Secret, RequestId: 1})
		return err
	}))
	for _, m := range msgs {
		if m != msgs[0] {
			t.Errorf("refusals differ: %q vs %q", m, msgs[0])
		}
	}
	q, err := c.lc[c.leader].Query(c.ctx, &pb.QueryRequest{Namespace: "ns"})
	if err != nil || len(q.Held) != 1 || q.Held[0].SessionId != owner.SessionId {
		t.Fatalf("after the forgeries the owner should still hold x: %v %v", q, err)
	}
	// The session stream too.
	st, err := c.lc[c.leader].Session(c.ctx)
	if err != nil {
		t.Fatal(err)
	}
	st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Attach{Attach: &pb.Attach{Namespace: "ns", SessionId: owner.SessionId, SessionSecret: attacker.Secret}}})
	if _, err := st.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Errorf("attaching to another session's stream: %v, want PermissionDenied", err)
	}
	// The owner releases with its own secret.
	if _, err := c.lc[(c.leader+1)%3].Release(c.ctx, &pb.ReleaseRequest{Namespace: "ns", SessionId: owner.SessionId, SessionSecret: owner.Secret, RequestId: 1}); err != nil {
		t.Fatalf("the owner's release through a follower: %v", err)
	}
}

// Every class of certain refusal is answered before the log: a closed
// session (its own secret learns that it ended), the namespace's session
// limit, the session's pending limit, and bad options.
func TestCertainRefusalsLeaveTheLogAlone(t *testing.T) {
	c := newCapCluster(t)
	gone := c.open("ns")
	if _, err := c.lc[c.leader].CloseSession(c.ctx, &pb.CloseSessionRequest{Namespace: "ns", SessionId: gone.SessionId, SessionSecret: gone.Secret}); err != nil {
		t.Fatal(err)
	}
	c.refused("a closed session, its own secret", codes.FailedPrecondition, func(lc pb.LocksClient) error {
		_, err := lc.Request(c.ctx, &pb.LockRequest{Namespace: "ns", SessionId: gone.SessionId, SessionSecret: gone.Secret, RequestId: 1, Names: []string{"a"}})
		return err
	})

	a, b := c.open("ns"), c.open("ns")
	c.open("ns") // the third: the limit is 3
	c.refused("a session over the namespace's limit", codes.ResourceExhausted, func(lc pb.LocksClient) error {
		_, err := lc.OpenSession(c.ctx, &pb.OpenSessionRequest{Namespace: "ns"})
		return err
	})

	if _, err := c.lc[c.leader].Request(c.ctx, &pb.LockRequest{Namespace: "ns", SessionId: a.SessionId, SessionSecret: a.Secret, RequestId: 1, Names: []string{"p", "q"}}); err != nil {
		t.Fatal(err)
	}
	if r, err := c.lc[c.leader].Request(c.ctx, &pb.LockRequest{Namespace: "ns", SessionId: b.SessionId, SessionSecret: b.Secret, RequestId: 1, Names: []string{"p"}}); err != nil || r.Status != pb.Status_STATUS_QUEUED {
		t.Fatalf("b's first request: %v %v", r, err)
	}
	c.refused("a second pending request over the session's limit of 1", codes.ResourceExhausted, func(lc pb.LocksClient) error {
		_, err := lc.Request(c.ctx, &pb.LockRequest{Namespace: "ns", SessionId: b.SessionId, SessionSecret: b.Secret, RequestId: 2, Names: []string{"q"}})
		return err
	})
	c.refused("steal with ifAvailable", codes.InvalidArgument, func(lc pb.LocksClient) error {
		_, err := lc.Request(c.ctx, &pb.LockRequest{Namespace: "ns", SessionId: a.SessionId, SessionSecret: a.Secret, RequestId: 9, Names: []string{"z"}, Steal: true, IfAvailable: true})
		return err
	})
	c.refused("a reserved name", codes.InvalidArgument, func(lc pb.LocksClient) error {
		_, err := lc.Request(c.ctx, &pb.LockRequest{Namespace: "ns", SessionId: a.SessionId, SessionSecret: a.Secret, RequestId: 9, Names: []string{"-x"}})
		return err
	})
}

// 100 copies of one (session, request id) at once propose one entry; every
// copy gets the first outcome.
func TestConcurrentCopiesProposeOnce(t *testing.T) {
	c := newCapCluster(t)
	s := c.open("ns")
	c.settled()
	before := c.logIndex()
	req := &pb.LockRequest{Namespace: "ns", SessionId: s.SessionId, SessionSecret: s.Secret, RequestId: 7, Names: []string{"once"}}
	var wg sync.WaitGroup
	tokens := make([]uint64, 100)
	errs := make([]error, 100)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.lc[c.leader].Request(c.ctx, req)
			errs[i] = err
			if err == nil {
				tokens[i] = r.Token
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("copy %d: %v", i, err)
		}
		if tokens[i] != tokens[0] || tokens[i] == 0 {
			t.Fatalf("copy %d got token %d, copy 0 %d", i, tokens[i], tokens[0])
		}
	}
	if added := c.logIndex() - before; added != 1 {
		t.Errorf("100 copies of one request added %d log entries, want 1", added)
	}
}

// A namespace over its write rate is refused before the log, on the
// leader; another namespace is not affected.
func TestNamespaceWriteQuota(t *testing.T) {
	c := nodetest.Start(t, 1, nodetest.Options{Quiet: true, Node: func(cfg *node.Config) {
		cfg.Server.NamespaceRate, cfg.Server.NamespaceBurst = 1, 5
		cfg.Server.SessionRate = 0
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := rawConn(t, c.Addrs()[0])
	lc := pb.NewLocksClient(conn)
	c.WaitLeader(10 * time.Second)
	var limited int
	var msg string
	for range 20 {
		_, err := lc.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: "greedy"})
		if status.Code(err) == codes.ResourceExhausted {
			limited++
			msg = status.Convert(err).Message()
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if limited < 10 {
		t.Fatalf("20 opens at once against a quota of 1/s (burst 5): %d refused", limited)
	}
	if !strings.Contains(msg, `namespace "greedy"`) || !strings.Contains(msg, "write rate") {
		t.Errorf("the refusal %q does not name the namespace and the quota", msg)
	}
	if _, err := lc.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: "modest"}); err != nil {
		t.Fatalf("another namespace: %v", err)
	}
}

package node_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/auth"
	"github.com/lockcluster/lockcluster/internal/node"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
	"github.com/lockcluster/lockcluster/internal/pki"
)

// Issue 24, finding 3: Cluster.Touch renewed any session by its id, from
// anyone. Written from the wire contract alone (api/lockclusterv1's
// generated clients, no Go client): a client keeps its session alive
// through a follower, whose heartbeats reach the leader by Touch, for
// several TTLs; then it goes silent, and a stranger calls Cluster.Touch on
// the leader with the session's id every 200 ms. The stranger is refused,
// PermissionDenied, and the session expires on time: its lock goes to the
// waiter. With auth off (plain text), with auth on (a namespace token, and
// the admin token, which is not a member's proof) and with mutual TLS (a
// certificate of the cluster's CA that names no member).

const (
	strangerTTL   = 2 * time.Second
	strangerAdmin = "admin-token-0123456789abcdef"
	strangerUser  = "user-token-0123456789abcdef"
)

type strangerCase struct {
	name string
	// node adjusts each node's configuration; client and stranger are the
	// dial options and the outgoing metadata of the session's client and
	// of the stranger.
	node             func(*node.Config)
	client, stranger []grpc.DialOption
	clientMD         metadata.MD
	strangerMD       metadata.MD
	// member, when set, dials as a member's certificate: its Touch is
	// accepted.
	member []grpc.DialOption
}

func TestStrangerTouchDoesNotKeepASessionAlive(t *testing.T) {
	tokens := func(cfg *node.Config) {
		cfg.Auth = auth.Config{AdminTokens: []string{strangerAdmin}, Namespaces: map[string]auth.Namespace{"ns": {Tokens: []string{strangerUser}}}}
	}
	bearer := func(token string) metadata.MD { return metadata.Pairs("authorization", "Bearer "+token) }
	certs := strangerCerts(t)
	withTLS := func(cfg *node.Config) {
		cfg.TLS = node.TLSFiles{CA: certs.file("ca.crt"), Cert: certs.file(cfg.ID + ".crt"), Key: certs.file(cfg.ID + ".key")}
	}
	for _, c := range []strangerCase{
		{name: "auth off, plain text"},
		{name: "auth on, a namespace token", node: tokens, clientMD: bearer(strangerUser), strangerMD: bearer(strangerUser)},
		{name: "auth on, the admin token", node: tokens, clientMD: bearer(strangerUser), strangerMD: bearer(strangerAdmin)},
		{name: "mutual TLS, a certificate that names no member", node: withTLS,
			client: certs.dial(t, ""), stranger: certs.dial(t, "stranger"), member: certs.dial(t, "node1")},
	} {
		t.Run(c.name, func(t *testing.T) { strangerTouch(t, c) })
	}
}

func strangerTouch(t *testing.T, sc strangerCase) {
	cl := nodetest.Start(t, 3, nodetest.Options{Quiet: true, Node: sc.node})
	leader := cl.WaitLeader(10 * time.Second)
	follower := (leader + 1) % 3
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cctx := metadata.NewOutgoingContext(ctx, sc.clientMD)
	lead := pb.NewLocksClient(rawConn(t, cl.Addrs()[leader], sc.client...))
	viaFollower := pb.NewLocksClient(rawConn(t, cl.Addrs()[follower], sc.client...))

	// The victim holds lock L in a session of a 2 s TTL; the waiter queues
	// for L in a session of its own.
	victim, err := viaFollower.OpenSession(cctx, &pb.OpenSessionRequest{Namespace: "ns", Label: "victim", Ttl: durationpb.New(strangerTTL)})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := viaFollower.Request(cctx, &pb.LockRequest{Namespace: "ns", SessionId: victim.SessionId, SessionSecret: victim.Secret, RequestId: 1, Names: []string{"L"}}); err != nil || r.Status != pb.Status_STATUS_GRANTED {
		t.Fatalf("the victim's lock: %v, %v", r, err)
	}
	waiter, err := lead.OpenSession(cctx, &pb.OpenSessionRequest{Namespace: "ns", Label: "waiter", Ttl: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := lead.Request(cctx, &pb.LockRequest{Namespace: "ns", SessionId: waiter.SessionId, SessionSecret: waiter.Secret, RequestId: 1, Names: []string{"L"}}); err != nil || r.Status != pb.Status_STATUS_QUEUED {
		t.Fatalf("the waiter's request: %v, %v", r, err)
	}

	// Forwarding works: the victim's stream on the follower heartbeats
	// every TTL/8, the follower forwards the heartbeats to the leader by
	// Touch, and the session outlives three of its TTLs: 25 heartbeats
	// acknowledged take at least 24 × TTL/8.
	sctx, stop := context.WithCancel(cctx)
	start := time.Now()
	acks := heartbeat(t, sctx, viaFollower, victim)
	cl.WaitFor(60*time.Second, "25 of the victim's heartbeats acknowledged through the follower", func() bool {
		return acks.Load() >= 25
	})
	if holder := holderOf(t, cctx, lead, "L"); holder != victim.SessionId {
		t.Fatalf("after %v of heartbeats through a follower (TTL %v), L is held by session %d, not the victim's %d: forwarded heartbeats did not renew it",
			time.Since(start).Round(time.Millisecond), strangerTTL, holder, victim.SessionId)
	}

	// The victim goes silent; the stranger touches its session.
	stop()
	silent := time.Now()
	var (
		mu      sync.Mutex
		renewed int
		refused []error
	)
	tctx, stopStranger := context.WithCancel(metadata.NewOutgoingContext(ctx, sc.strangerMD))
	stranger := pb.NewClusterClient(rawConn(t, cl.Addrs()[leader], sc.stranger...))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for end := time.Now().Add(3 * strangerTTL); time.Now().Before(end); {
			_, err := stranger.Touch(tctx, &pb.TouchRequest{SessionIds: []uint64{victim.SessionId}})
			mu.Lock()
			if err == nil {
				renewed++
			} else if tctx.Err() == nil {
				refused = append(refused, err)
			}
			mu.Unlock()
			select {
			case <-tctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	var granted time.Duration
	cl.WaitFor(30*time.Second, "the victim's lock granted to the waiter", func() bool {
		if holderOf(t, cctx, lead, "L") != waiter.SessionId {
			return false
		}
		granted = time.Since(silent)
		return true
	})
	stopStranger()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	// On time: the deadline is the last renewal plus the TTL; the rest is
	// the leader's tick, the expiry's entry and this test's polling.
	if limit := strangerTTL + 2*time.Second; granted > limit {
		t.Errorf("the waiter got L %v after the victim went silent, over its TTL of %v (limit %v): the stranger's Touch (%d accepted) kept the session alive", granted.Round(time.Millisecond), strangerTTL, limit, renewed)
	}
	if renewed > 0 || len(refused) == 0 {
		t.Errorf("the stranger's Touch was accepted %d times and refused %d times; want refused every time", renewed, len(refused))
	}
	for _, err := range refused {
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("the stranger's Touch: %v, want PermissionDenied", err)
			break
		}
	}
	if len(refused) > 0 {
		t.Logf("the stranger's Touch: %v (the waiter got L %v after the victim went silent)", refused[0], granted.Round(time.Millisecond))
	}
	// A member's certificate, without the secret, is a member's proof.
	if sc.member != nil {
		member := pb.NewClusterClient(rawConn(t, cl.Addrs()[leader], sc.member...))
		if _, err := member.Touch(ctx, &pb.TouchRequest{}); err != nil {
			t.Errorf("Touch with a member's certificate: %v", err)
		}
	}
}

// heartbeat attaches sess's stream and heartbeats every 250 ms until ctx
// ends; it counts the acknowledgements.
func heartbeat(t *testing.T, ctx context.Context, lc pb.LocksClient, sess *pb.OpenSessionResponse) *atomic.Int64 {
	t.Helper()
	st, err := lc.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Attach{Attach: &pb.Attach{Namespace: "ns", SessionId: sess.SessionId, SessionSecret: sess.Secret}}}); err != nil {
		t.Fatal(err)
	}
	if m, err := st.Recv(); err != nil || m.GetSynced() == nil {
		t.Fatalf("attach: %v, %v", m, err)
	}
	acks := &atomic.Int64{}
	go func() {
		for {
			m, err := st.Recv()
			if err != nil {
				return
			}
			if m.GetHeartbeatAck() != nil {
				acks.Add(1)
			}
		}
	}()
	go func() {
		tick := time.NewTicker(strangerTTL / 8)
		defer tick.Stop()
		for id := uint64(1); ; id++ {
			if st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Heartbeat{Heartbeat: &pb.Heartbeat{Id: id}}}) != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return acks
}

// holderOf is the session that holds name in namespace ns (0: none).
func holderOf(t *testing.T, ctx context.Context, lc pb.LocksClient, name string) uint64 {
	t.Helper()
	q, err := lc.Query(ctx, &pb.QueryRequest{Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range q.Held {
		if h.Name == name {
			return h.SessionId
		}
	}
	return 0
}

// testCerts is a CA with a certificate for each node (node0, node1,
// node2: the nodes' ids) and one for a stranger, all valid for 127.0.0.1.
type testCerts struct{ dir string }

func strangerCerts(t *testing.T) testCerts {
	dir := t.TempDir()
	if err := pki.CreateCA(dir, "test CA", time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"node0", "node1", "node2", "stranger"} {
		if err := pki.CreateCert(pki.CertRequest{CADir: dir, OutDir: dir, Name: n, Hosts: []string{"127.0.0.1", "localhost"}, Validity: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	return testCerts{dir}
}

func (c testCerts) file(name string) string { return filepath.Join(c.dir, name) }

// dial is the dial option of a TLS client trusting the CA and presenting
// the certificate of name ("": none).
func (c testCerts) dial(t *testing.T, name string) []grpc.DialOption {
	pem, err := os.ReadFile(c.file("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if name != "" {
		pair, err := tls.LoadX509KeyPair(c.file(name+".crt"), c.file(name+".key"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}
}

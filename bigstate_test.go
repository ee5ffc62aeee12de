package lockcluster_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/lockcluster/lockcluster"
	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
)

// A session's state and a namespace's may be far larger than one gRPC
// message (4 MiB by default) while within the limits: 100 locks of 64
// names of about 1 KiB (the name and scope limits) are 6.4 MB. Such a
// session survives the failover of its stream's node (its sync comes in
// pieces), and its namespace can be queried (in pages) — issue 24,
// finding 6.
const (
	bigLocks    = 100
	bigScope    = 64   // the default limit on names in one request
	bigNameSize = 1000 // the default limit is 1 KiB
)

// bigNames are lock i's names: bigScope names of bigNameSize bytes.
func bigNames(prefix string, i int) []string {
	names := make([]string, bigScope)
	for j := range names {
		n := fmt.Sprintf("%s/%03d/%02d/", prefix, i, j)
		names[j] = n + strings.Repeat("x", bigNameSize-len(n))
	}
	return names
}

// holdBig acquires bigLocks locks of bigScope names each.
func holdBig(t *testing.T, cl *lockcluster.Client, prefix string) []*lockcluster.Lock {
	t.Helper()
	ctx := ctxT(t)
	locks := make([]*lockcluster.Lock, bigLocks)
	for i := range locks {
		names := bigNames(prefix, i)
		l, err := cl.Acquire(ctx, names[0], lockcluster.Options{Scope: names[1:]})
		if err != nil {
			t.Fatalf("lock %d: %v", i, err)
		}
		locks[i] = l
	}
	return locks
}

// syncTap watches the client's session streams: the latest one's
// endpoint, whether its sync arrived whole (the last piece, or the only
// message) and how many heartbeat acks came after it, and the Synced
// messages of all of them.
type syncTap struct {
	mu     sync.Mutex
	latest *syncTapped
	target string // the latest stream's endpoint
	synced bool   // the latest stream's sync arrived whole
	acks   int    // on the latest stream, after its sync
	pieces int    // Synced messages on every stream
}

func (tp *syncTap) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || !strings.HasSuffix(method, "/Session") {
		return cs, err
	}
	s := &syncTapped{ClientStream: cs, tp: tp}
	tp.mu.Lock()
	tp.latest, tp.target, tp.synced, tp.acks = s, cc.Target(), false, 0
	tp.mu.Unlock()
	return s, nil
}

// state is the latest stream's endpoint, whether its sync arrived and the
// acks since, and the Synced messages so far.
func (tp *syncTap) state() (target string, synced bool, acks, pieces int) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.target, tp.synced, tp.acks, tp.pieces
}

type syncTapped struct {
	grpc.ClientStream
	tp *syncTap
}

func (s *syncTapped) RecvMsg(m any) error {
	if err := s.ClientStream.RecvMsg(m); err != nil {
		return err
	}
	down, _ := m.(*pb.SessionDown)
	tp := s.tp
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if sy := down.GetSynced(); sy != nil {
		tp.pieces++
		if !sy.More && tp.latest == s {
			tp.synced = true
		}
	}
	if down.GetHeartbeatAck() != nil && tp.latest == s && tp.synced {
		tp.acks++
	}
	return nil
}

// (a) The session holds 6.4 MB of locks; the node its stream is attached
// to stops. The client re-attaches to another node, which sends the sync in
// pieces, and every lock is still held. Checked on the code before the
// change: the re-attach's Synced (one message of 6.4 MB) was over the
// client's receive limit, every re-attach failed, and every lock was lost
// a TTL later.
func TestBigSessionSyncSurvivesTheFailoverOfItsStreamsNode(t *testing.T) {
	c := nodetest.Start(t, 3, nodetest.Options{Quiet: true})
	addrs := c.Addrs()
	tp := &syncTap{}
	cl := dialAddrs(t, addrs, lockcluster.WithNamespace("big"), lockcluster.WithDialOptions(grpc.WithStreamInterceptor(tp.intercept)))
	locks := holdBig(t, cl, t.Name())
	target, _, _, _ := tp.state()
	i := slices.Index(addrs, target)
	if i < 0 {
		t.Fatalf("the session stream went to %q, not one of %v", target, addrs)
	}
	c.Stop(i)
	lost := func() error {
		for k, l := range locks {
			if err := l.Err(); err != nil {
				return fmt.Errorf("lock %d: %w", k, err)
			}
		}
		return nil
	}
	c.WaitFor(40*time.Second, "the stream to re-attach elsewhere and be renewed, or a lock to be lost", func() bool {
		now, synced, acks, _ := tp.state()
		return now != target && synced && acks > 0 || lost() != nil
	})
	if err := lost(); err != nil {
		t.Fatalf("a lock was lost at the failover of the stream's node %s: %v", target, err)
	}
	_, _, _, pieces := tp.state()
	q, err := cl.Query(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	mine := 0
	for _, l := range q.Held {
		if l.SessionID == cl.SessionID() {
			mine++
		}
	}
	if mine != bigLocks*bigScope {
		t.Fatalf("the session holds %d names after the failover; want %d", mine, bigLocks*bigScope)
	}
	for k, l := range locks {
		if err := l.Release(ctxT(t)); err != nil {
			t.Fatalf("release of lock %d after the failover: %v", k, err)
		}
	}
	t.Logf("sync pieces received: %d (the re-attach's sync is 6.4 MB)", pieces)
}

// (b) A namespace of 6.4 MB of locks is queried: through the Go client,
// and through a client written from the proto alone, with gRPC's default
// 4 MiB receive limit, that reads QueryPages by hand, through each node
// (a follower relays the leader's pages). The unary Query, one message,
// is over that limit. Checked on the code before the change: the Go
// client's Query failed "received message larger than max".
func TestQueryOfANamespaceLargerThanAMessage(t *testing.T) {
	c := shared(t)
	ns := "bigquery"
	cl := dial(t, c, lockcluster.WithNamespace(ns))
	holdBig(t, cl, t.Name())
	want := map[string]bool{}
	for i := range bigLocks {
		for _, n := range bigNames(t.Name(), i) {
			want[n] = true
		}
	}
	check := func(via string, held []string) {
		t.Helper()
		if len(held) != len(want) {
			t.Fatalf("%s: %d held names, want %d", via, len(held), len(want))
		}
		for _, n := range held {
			if !want[n] {
				t.Fatalf("%s: held name %.40q… is not one of the test's", via, n)
			}
		}
	}

	q, err := cl.Query(ctxT(t))
	if err != nil {
		t.Fatalf("Go client's Query: %v", err)
	}
	var held []string
	for _, l := range q.Held {
		held = append(held, l.Name)
	}
	check("the Go client", held)

	for _, addr := range c.Addrs() {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		lc := pb.NewLocksClient(cc)
		ctx := ctxT(t)
		if _, err := lc.Query(ctx, &pb.QueryRequest{Namespace: ns}); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("unary Query via %s: %v; want ResourceExhausted (the answer is over 4 MiB)", addr, err)
		}
		st, err := lc.QueryPages(ctx, &pb.QueryRequest{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		var held []string
		var index uint64
		pages := 0
		for {
			p, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("QueryPages via %s, page %d: %v", addr, pages+1, err)
			}
			if pages++; pages == 1 {
				index = p.Index
			}
			if p.Index != index || p.Index == 0 {
				t.Fatalf("QueryPages via %s: page %d at index %d, the first at %d", addr, pages, p.Index, index)
			}
			if size := proto.Size(p); size > 2<<20 {
				t.Fatalf("QueryPages via %s: page %d is %d bytes", addr, pages, size)
			}
			for _, l := range p.Held {
				held = append(held, l.Name)
			}
			if len(p.Pending) > 0 {
				t.Fatalf("QueryPages via %s: %d pending; want none", addr, len(p.Pending))
			}
		}
		if pages < 5 {
			t.Fatalf("QueryPages via %s: %d pages for 6.4 MB; want pages of about 1 MiB", addr, pages)
		}
		check("QueryPages by hand via "+addr, held)
	}
}

package node_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/node"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
)

// Hostile input never crashes a node, never stalls other namespaces and
// never corrupts state (issue 6). A well-behaved client in another
// namespace keeps taking and releasing a lock throughout: every one of
// its calls completes, and it still does once the abuse is over; at the
// end every node has the same state.
func TestHostileInput(t *testing.T) {
	c := nodetest.Start(t, 3, nodetest.Options{Quiet: true, Node: func(cfg *node.Config) {
		cfg.Server.SessionRate, cfg.Server.SessionBurst = 10, 10
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	addr := c.Addrs()[0]
	cc := rawConn(t, addr)
	lc := pb.NewLocksClient(cc)
	secrets := map[uint64][]byte{}
	var secretsMu sync.Mutex
	secretOf := func(id uint64) []byte { secretsMu.Lock(); defer secretsMu.Unlock(); return secrets[id] }
	open := func(ns string) uint64 {
		s, err := lc.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: ns, Ttl: durationpb.New(10 * time.Minute)}) // no heartbeats here: outlive the test
		if err != nil {
			t.Fatal(err)
		}
		secretsMu.Lock()
		secrets[s.SessionId] = s.Secret
		secretsMu.Unlock()
		return s.SessionId
	}

	// The bystander: another namespace, taking and releasing a lock. Each
	// round has a deadline of its own, a generous one that only catches a
	// stall (the abuse starving the other namespaces), not a claim about
	// speed.
	const stalled = 20 * time.Second
	stop := make(chan struct{})
	stopped := make(chan struct{})
	var rounds atomic.Int64 // completed
	bystander := open("bystander")
	halt := sync.OnceFunc(func() { close(stop); <-stopped })
	defer halt() // also where the test fails early: no Errorf after it ended
	go func() {
		defer close(stopped)
		// Four locks a second: well inside the per-session rate limit.
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for n := uint64(1); ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			rctx, rcancel := context.WithTimeout(ctx, stalled)
			_, err := lc.Request(rctx, &pb.LockRequest{Namespace: "bystander", SessionId: bystander, SessionSecret: secretOf(bystander), RequestId: n, Names: []string{"b"}})
			if err == nil {
				_, err = lc.Release(rctx, &pb.ReleaseRequest{Namespace: "bystander", SessionId: bystander, SessionSecret: secretOf(bystander), RequestId: n})
			}
			rcancel()
			if err != nil {
				t.Errorf("bystander, round %d: %v", n, err)
				continue
			}
			rounds.Add(1)
		}
	}()

	hostile := open("hostile")
	req := func(id uint64, names ...string) error {
		_, err := lc.Request(ctx, &pb.LockRequest{Namespace: "hostile", SessionId: hostile, SessionSecret: secretOf(hostile), RequestId: id, Names: names})
		return err
	}
	wantCode := func(what string, err error, code codes.Code) {
		t.Helper()
		if status.Code(err) != code {
			t.Errorf("%s: %v, want %s", what, err, code)
		}
	}

	t.Run("huge name", func(t *testing.T) {
		wantCode("1 MiB name", req(1, strings.Repeat("n", 1<<20)), codes.ResourceExhausted)
		wantCode("8 MiB name", req(2, strings.Repeat("n", 8<<20)), codes.ResourceExhausted)
	})
	t.Run("scope of 100,000 names", func(t *testing.T) {
		names := make([]string, 100_000)
		for i := range names {
			names[i] = "n" + strings.Repeat("x", i%7) + string(rune('a'+i%26))
		}
		wantCode("100,000 names", req(3, names...), codes.ResourceExhausted)
	})
	t.Run("invalid UTF-8 on the wire", func(t *testing.T) {
		// A client that does not validate: the raw bytes of a LockRequest
		// whose name is not UTF-8.
		var b []byte
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, "hostile")
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, hostile)
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, 4)
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, []byte{0xff, 0xfe})
		var out []byte
		err := cc.Invoke(ctx, "/lockcluster.v1.Locks/Request", rawMessage(b), (*rawMessage)(&out), grpc.ForceCodecV2(rawCodec{}))
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("invalid UTF-8 in a name: %v, want InvalidArgument (a TypeError, never Internal: see TestUndecodableMessagesAreInvalidArgument)", err)
		}
	})
	t.Run("flood from one session", func(t *testing.T) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		limited := 0
		for w := 0; w < 20; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; i < 10; i++ {
					id := uint64(1000 + w*1000 + i)
					err := req(id, "flood")
					if status.Code(err) == codes.ResourceExhausted {
						mu.Lock()
						limited++
						mu.Unlock()
					} else if err == nil {
						lc.Abort(ctx, &pb.AbortRequest{Namespace: "hostile", SessionId: hostile, SessionSecret: secretOf(hostile), RequestId: id})
					}
				}
			}(w)
		}
		wg.Wait()
		if limited == 0 {
			t.Error("200 requests at once from one session were never rate limited")
		}
	})
	t.Run("a stream that never reads", func(t *testing.T) {
		sctx, scancel := context.WithCancel(ctx)
		defer scancel()
		st, err := lc.Session(sctx)
		if err != nil {
			t.Fatal(err)
		}
		st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Attach{Attach: &pb.Attach{Namespace: "hostile", SessionId: hostile, SessionSecret: secretOf(hostile)}}})
		// Make events for the session and never read them (the hub cuts
		// such a stream off once it falls 4096 events or its byte cap
		// behind: see TestHubCutsOffSlowStreamsAndSkipsSyncedEvents and
		// TestStalledStreamIsCutByBytes).
		for i := 0; i < 20; i++ {
			id := uint64(100_000 + i)
			if req(id, "evt") == nil {
				lc.Release(ctx, &pb.ReleaseRequest{Namespace: "hostile", SessionId: hostile, SessionSecret: secretOf(hostile), RequestId: id})
			}
		}
	})
	t.Run("half-open connections", func(t *testing.T) {
		for _, a := range []string{addr, c.Nodes[0].RaftAddr()} {
			for i := 0; i < 20; i++ {
				conn, err := net.Dial("tcp", a)
				if err != nil {
					t.Fatal(err)
				}
				conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12\x04garbage"))
				defer conn.Close() // left open, never finished
			}
		}
	})

	// The bystander still takes and releases its lock after the abuse.
	after := rounds.Load()
	c.WaitFor(stalled, "the bystander to complete a round after the abuse", func() bool { return rounds.Load() > after })
	halt()
	for _, n := range c.Nodes {
		if _, err := pb.NewClusterClient(cc).Status(ctx, &pb.StatusRequest{}); err != nil {
			t.Fatalf("node %s no longer answers: %v", n.ID(), err)
		}
	}
	c.WaitFor(10*time.Second, "every node to reach the same state", func() bool {
		d := c.Nodes[0].Machine().Digest()
		for _, n := range c.Nodes[1:] {
			if n.Machine().Digest() != d {
				return false
			}
		}
		return true
	})
}

// rawMessage and rawCodec send bytes as they are.
type rawMessage []byte

type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case rawMessage:
		return mem.BufferSlice{mem.SliceBuffer(m)}, nil
	case *rawMessage:
		return mem.BufferSlice{mem.SliceBuffer(*m)}, nil
	}
	return nil, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*rawMessage) = data.Materialize()
	return nil
}

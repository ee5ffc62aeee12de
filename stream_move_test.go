package lockcluster_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/lockcluster/lockcluster"
	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// streamTap wraps the client's session streams: it remembers the endpoint
// each was opened to, and can make a stream deaf (it drops heartbeat acks,
// as a node that cannot renew the session does) or frozen (it delivers
// nothing more, as a stream whose node has not noticed anything yet).
type streamTap struct {
	mu      sync.Mutex
	targets []string
	deaf    string // endpoint whose streams lose their acks
	frozen  atomic.Bool
	acked   atomic.Int64 // acks delivered on streams that are not deaf
}

func (tp *streamTap) opened() []string {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return append([]string(nil), tp.targets...)
}

func (tp *streamTap) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || !strings.HasSuffix(method, "/Session") {
		return cs, err
	}
	tp.mu.Lock()
	tp.targets = append(tp.targets, cc.Target())
	deaf := tp.deaf == cc.Target()
	tp.mu.Unlock()
	return &tappedStream{ClientStream: cs, tp: tp, deaf: deaf}, nil
}

type tappedStream struct {
	grpc.ClientStream
	tp   *streamTap
	deaf bool
}

func (s *tappedStream) RecvMsg(m any) error {
	for {
		if s.tp.frozen.Load() {
			<-s.Context().Done()
			return s.Context().Err()
		}
		if err := s.ClientStream.RecvMsg(m); err != nil {
			return err
		}
		if s.tp.frozen.Load() {
			continue // received after the freeze: never delivered
		}
		if down, ok := m.(*pb.SessionDown); ok && down.GetHeartbeatAck() != nil {
			if s.deaf {
				continue
			}
			s.tp.acked.Add(1)
		}
		return nil
	}
}

// A session stream whose node acknowledges no heartbeat (cut off from the
// leader, paused) moves to another endpoint after TTL/3, while two thirds
// of the TTL are left, and the session and its lock survive (issue 10
// item 7, docs/chaos.md finding 2). Checked on the code before the fix:
// the stream stayed on the deaf endpoint and the lock was lost to
// jeopardy after one TTL.
func TestStreamMovesOffANodeThatCannotRenew(t *testing.T) {
	c := shared(t)
	addrs := c.Addrs()
	tp := &streamTap{deaf: addrs[0]}
	cl := dialAddrs(t, addrs, lockcluster.WithTTL(6*time.Second), lockcluster.WithDialOptions(grpc.WithStreamInterceptor(tp.intercept)))
	ctx := ctxT(t)
	l, err := cl.Acquire(ctx, t.Name(), lockcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if got := tp.opened(); len(got) == 0 || got[0] != addrs[0] {
		t.Fatalf("first session stream went to %v, want %s", got, addrs[0])
	}
	moved := func() bool {
		for _, a := range tp.opened() {
			if a != addrs[0] {
				return true
			}
		}
		return false
	}
	c.WaitFor(15*time.Second, "the stream to move or the lock to be lost", func() bool {
		return moved() && tp.acked.Load() > 0 || l.Err() != nil
	})
	if err := l.Err(); err != nil {
		t.Fatalf("the lock was lost (streams opened to %v): %v", tp.opened(), err)
	}
	if cl.SessionID() == 0 {
		t.Fatal("the session ended")
	}
}

// A request answered "session not open" (the cluster expired or closed
// the session, and the client has not heard yet) ends the client's session
// at once: its locks are lost, and the next call runs in a new session
// instead of failing in the old one again (issue 10 item 7, docs/chaos.md
// finding 4). Checked on the code before the fix: SessionID stayed the old
// one and the second Acquire failed with ErrSessionClosed too.
func TestSessionNotOpenEndsTheSession(t *testing.T) {
	c := shared(t)
	tp := &streamTap{}
	cl := dial(t, c, lockcluster.WithTTL(time.Minute), lockcluster.WithDialOptions(grpc.WithStreamInterceptor(tp.intercept)))
	ctx := ctxT(t)
	name := t.Name()
	held, err := cl.Acquire(ctx, name+"/held", lockcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	old, secret := cl.SessionID(), cl.SessionSecret()
	// The stream hears nothing more, and the session is closed behind the
	// client's back (as the leader expires one).
	tp.frozen.Store(true)
	raw := rawLocks(t, c.Addrs()[1])
	if _, err := raw.CloseSession(ctx, &pb.CloseSessionRequest{Namespace: "default", SessionId: old, SessionSecret: secret}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Acquire(ctx, name, lockcluster.Options{}); !errors.Is(err, lockcluster.ErrSessionClosed) {
		t.Fatalf("Acquire in a session the cluster closed: %v, want ErrSessionClosed", err)
	}
	if id := cl.SessionID(); id == old {
		t.Fatalf("the client still uses session %d after the cluster said it is not open", id)
	}
	if !errors.Is(held.Err(), lockcluster.ErrSessionLost) {
		t.Fatalf("the lock of the closed session: %v, want ErrSessionLost", held.Err())
	}
	tp.frozen.Store(false)
	l, err := cl.Acquire(ctx, name, lockcluster.Options{})
	if err != nil {
		t.Fatalf("the next Acquire: %v, want it granted in a new session", err)
	}
	defer l.Release(ctx)
	if id := cl.SessionID(); id == old || id == 0 {
		t.Fatalf("the next Acquire ran in session %d (the old one was %d)", id, old)
	}
}

func rawLocks(t *testing.T, addr string) pb.LocksClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return pb.NewLocksClient(cc)
}

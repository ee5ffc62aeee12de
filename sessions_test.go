package lockcluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockcluster/lockcluster"
	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
)

// A client that dies (never heartbeats) is expired after its TTL, and its
// lock goes to the next in line: queued first, granted once the session
// has gone a whole TTL without a sign of life, never before.
func TestDeadClientIsExpired(t *testing.T) {
	c := shared(t)
	ctx := ctxT(t)
	cc, err := grpc.NewClient(c.Addrs()[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	raw := pb.NewLocksClient(cc)
	const ttl = time.Second
	// The dead client's last sign of life comes after this: the session's
	// deadline is at least a TTL later, and a deadline never fires early.
	opened := time.Now()
	s, err := raw.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: "default", Label: "dies", Ttl: durationpb.New(ttl)})
	if err != nil {
		t.Fatal(err)
	}
	name := t.Name()
	r, err := raw.Request(ctx, &pb.LockRequest{Namespace: "default", SessionId: s.SessionId, SessionSecret: s.Secret, RequestId: 1, Names: []string{name}})
	if err != nil || r.Status != pb.Status_STATUS_GRANTED {
		t.Fatalf("dead client's request: %v %v", r, err)
	}
	b := dial(t, c)
	queued := false
	// ctx's deadline only stops a hung test: the grant must come, whenever.
	l, err := b.Acquire(ctx, name, lockcluster.Options{OnQueued: func() { queued = true }})
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	defer l.Release(ctx)
	if !queued {
		t.Fatal("granted at once: the dead client's session still held the lock, the request must have queued")
	}
	if d := granted.Sub(opened); d < ttl {
		t.Fatalf("granted %s after the dead client's session opened: it must not expire before its TTL (%s)", d, ttl)
	}
	if l.Token() <= r.Token {
		t.Fatalf("token %d after the dead client's %d", l.Token(), r.Token)
	}
}

// Jeopardy (SPEC §4): a client that cannot get a heartbeat acknowledged
// for a whole TTL cancels its locks' contexts with ErrSessionLost.
func TestJeopardyCancelsLocks(t *testing.T) {
	c := nodetest.Start(t, 3, nodetest.Options{Quiet: true})
	cl := dial(t, c, lockcluster.WithTTL(time.Second))
	ctx := ctxT(t)
	l, err := cl.Acquire(ctx, "x", lockcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("the lock was lost while the cluster acknowledged its heartbeats: %v", err)
	}
	c.StopAll()
	// ctx's deadline only stops a hung test. That a holder sees the loss
	// before it could act on an expired session is
	// TestPausedHolderSeesLossFirst's.
	select {
	case <-l.Done():
	case <-ctx.Done():
		t.Fatal("the lock's context was not cancelled after a TTL without acknowledged heartbeats")
	}
	if !errors.Is(l.Err(), lockcluster.ErrSessionLost) {
		t.Fatalf("cause %v, want ErrSessionLost", l.Err())
	}
	down, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := cl.Acquire(down, "y", lockcluster.Options{IfAvailable: true}); err == nil {
		t.Fatal("acquired with the cluster down")
	}
}

// reattachDelay spreads a reattach over TTL/20 and keeps at least half
// the backoff (issue 21: 10,000 sessions reattaching at once starved raft).
func TestReattachDelaySpreads(t *testing.T) {
	const ttl = 10 * time.Second
	var lo, hi time.Duration = time.Hour, 0
	for range 2000 {
		d := lockcluster.ReattachDelay(20*time.Millisecond, ttl)
		if d < 10*time.Millisecond || d > ttl/20 {
			t.Fatalf("lockcluster.ReattachDelay(20ms, 10s) = %s: want within [10ms, 500ms]", d)
		}
		lo, hi = min(lo, d), max(hi, d)
	}
	if hi-lo < ttl/40 {
		t.Fatalf("2000 delays spread over only %s..%s: want about TTL/20", lo, hi)
	}
	if d := lockcluster.ReattachDelay(400*time.Millisecond, 0); d < 200*time.Millisecond || d > 400*time.Millisecond {
		t.Fatalf("lockcluster.ReattachDelay(400ms, no TTL) = %s: want within [200ms, 400ms]", d)
	}
}

// A node's RetryInfo (a shed attach, every stream ended at once) is
// honoured when longer than the session's own delay, within TTL/6.
func TestReattachHonoursRetryInfo(t *testing.T) {
	const ttl = 10 * time.Second
	asking := func(d time.Duration) error {
		st, err := status.New(codes.Unavailable, "shed").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
		if err != nil {
			t.Fatal(err)
		}
		return st.Err()
	}
	if d := lockcluster.ReattachAfter(ttl, asking(900*time.Millisecond), 20*time.Millisecond); d != 900*time.Millisecond {
		t.Fatalf("asked to wait 900ms: waits %s", d)
	}
	if d := lockcluster.ReattachAfter(ttl, asking(time.Minute), 20*time.Millisecond); d != ttl/6 {
		t.Fatalf("asked to wait a minute: waits %s, want TTL/6", d)
	}
	if d := lockcluster.ReattachAfter(ttl, errors.New("plain"), 20*time.Millisecond); d > ttl/20 {
		t.Fatalf("no RetryInfo: waits %s, want at most TTL/20", d)
	}
}

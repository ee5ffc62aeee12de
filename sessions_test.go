package lockcluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockcluster/lockcluster"
	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/api/node/nodetest"
)

// A client that dies (never heartbeats) is expired after its TTL, and its
// lock goes to the next in line.
func TestDeadClientIsExpired(t *testing.T) {
	c := shared(t)
	ctx := ctxT(t)
	cc, err := grpc.NewClient(c.Addrs()[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	raw := pb.NewLocksClient(cc)
	s, err := raw.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: "default", Label: "dies", Ttl: durationpb.New(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	name := t.Name()
	r, err := raw.Request(ctx, &pb.LockRequest{Namespace: "default", SessionId: s.SessionId, SessionSecret: s.Secret, RequestId: 1, Names: []string{name}})
	if err != nil || r.Status != pb.Status_STATUS_GRANTED {
		t.Fatalf("dead client's request: %v %v", r, err)
	}
	b := dial(t, c)
	start := time.Now()
	l, err := b.Acquire(ctx, name, lockcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if d := time.Since(start); d < 500*time.Millisecond || d > 5*time.Second {
		t.Fatalf("granted after %s: want about the dead client's TTL (1s)", d)
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
	c.StopAll()
	stopped := time.Now()
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lock's context was not cancelled after a TTL without acknowledged heartbeats")
	}
	if d := time.Since(stopped); d > 1500*time.Millisecond {
		t.Errorf("jeopardy took %s after the last possible ack, TTL is 1s", d)
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

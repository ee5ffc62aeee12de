package main

import (
	"context"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockcluster/lockcluster"
	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/testutil"
)

// A whole-cluster restart keeps held locks, queues and sessions.
func TestWholeClusterRestartKeepsState(t *testing.T) {
	pc := startProcs(t, 3)
	a, b := dialT(t, pc.addrs()), dialT(t, pc.addrs())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	la, err := a.Acquire(ctx, "x", lockcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan *lockcluster.Lock, 1)
	go func() {
		l, err := b.Acquire(ctx, "x", lockcluster.Options{Scope: []string{"y"}})
		if err != nil {
			t.Error(err)
		}
		granted <- l
	}()
	testutil.Eventually(t, 10*time.Second, "b to queue", func() bool {
		q, err := a.Query(ctx)
		return err == nil && len(q.Pending) == 2
	})
	before, _ := a.Query(ctx)

	pc.restartAll(syscall.SIGTERM)
	pc.leader(15 * time.Second)

	after, err := a.Query(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Held) != len(before.Held) || len(after.Pending) != len(before.Pending) || after.Held[0].Token != la.Token() {
		t.Fatalf("after the restart %+v, before %+v", after, before)
	}
	for i := range before.Pending {
		if before.Pending[i].SessionID != after.Pending[i].SessionID || before.Pending[i].Name != after.Pending[i].Name {
			t.Fatalf("queues changed: after %+v, before %+v", after.Pending, before.Pending)
		}
	}
	if err := la.Err(); err != nil {
		t.Fatalf("a's lock was lost in the restart: %v", err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-granted:
		if l == nil || len(l.Names()) != 2 {
			t.Fatalf("b's scope lock: %+v", l)
		}
	case <-ctx.Done():
		t.Fatal("b's queued request was not granted after the restart before the test's deadline")
	}
}

// A request retried with the same id on another node, after the leader
// died, never queues twice.
func TestRetryAcrossFailoverNeverQueuesTwice(t *testing.T) {
	pc := startProcs(t, 3)
	holder := dialT(t, pc.addrs())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := holder.Acquire(ctx, "x", lockcluster.Options{}); err != nil {
		t.Fatal(err)
	}
	leader := pc.leader(5 * time.Second)
	conn := func(i int) pb.LocksClient {
		cc, err := grpc.NewClient(pc.Nodes[i].GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return pb.NewLocksClient(cc)
	}
	first := conn(leader)
	other := (leader + 1) % 3
	second := conn(other)
	s, err := first.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: "default", Ttl: durationpb.New(30 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	req := &pb.LockRequest{Namespace: "default", SessionId: s.SessionId, SessionSecret: s.Secret, RequestId: 7, Names: []string{"x"}, Signal: true}
	r1, err := first.Request(ctx, req)
	if err != nil || r1.Status != pb.Status_STATUS_QUEUED {
		t.Fatalf("first try: %v %v", r1, err)
	}
	pc.kill(leader)
	var r2 *pb.LockResponse
	testutil.Eventually(t, 10*time.Second, "the retry to be answered by the new leader", func() bool {
		r2, err = second.Request(ctx, req)
		return err == nil
	})
	if r2.Status != pb.Status_STATUS_QUEUED || !r2.Duplicate {
		t.Fatalf("retry: %v, want queued (duplicate)", r2)
	}
	q, err := second.Query(ctx, &pb.QueryRequest{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range q.Pending {
		if p.SessionId == s.SessionId {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the session has %d pending entries after the retry, want 1: %v", n, q.Pending)
	}
}

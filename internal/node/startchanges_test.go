package node_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
)

// A cluster nobody has watched builds no changes (fsm's startchanges.go).
// The first watch, here on a follower, starts them on every node at one
// index, from which a watch resumes on any node; a resume from before it
// is COMPACTED, naming it.
func TestChangesStartWithTheFirstWatch(t *testing.T) {
	c := nodetest.Start(t, 3, nodetest.Options{Quiet: true})
	leader := c.WaitLeader(10 * time.Second)
	follower, other := (leader+1)%3, (leader+2)%3
	lc := pb.NewLocksClient(rawConn(t, c.Addrs()[leader]))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open, err := lc.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: "s", Ttl: durationpb.New(10 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	lock := func(id uint64) {
		t.Helper()
		_, err := lc.Request(ctx, &pb.LockRequest{Namespace: "s", SessionId: open.SessionId, SessionSecret: open.Secret, RequestId: id, Names: []string{"a"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lc.Release(ctx, &pb.ReleaseRequest{Namespace: "s", SessionId: open.SessionId, SessionSecret: open.Secret, RequestId: id}); err != nil {
			t.Fatal(err)
		}
	}
	lock(1)
	last := c.Nodes[leader].Machine().LastIndex()
	for i := range 3 {
		c.WaitFor(5*time.Second, "every node applies the locks", func() bool { return c.Nodes[i].Machine().LastIndex() >= last })
		if from, n := c.Nodes[i].Machine().ChangesFrom(), scrape(t, c, i, "lockcluster_watch_history_changes"); from != 0 || n != 0 {
			t.Fatalf("node %d builds changes nobody watched: from index %d, %v held", i, from, n)
		}
	}

	st, err := pb.NewLocksClient(rawConn(t, c.Addrs()[follower])).Watch(ctx, &pb.WatchRequest{Namespace: "s"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := st.Recv()
	if err != nil || first.GetSnapshot() == nil {
		t.Fatalf("the follower's watch began with %v, %v; want its snapshot", first, err)
	}
	at := first.GetSnapshot().GetIndex()
	from := c.Nodes[follower].Machine().ChangesFrom()
	if from == 0 || from <= last || from > at {
		t.Fatalf("changes start at index %d, want after the locks (%d) and at or before the snapshot (%d)", from, last, at)
	}
	for i := range 3 {
		c.WaitFor(5*time.Second, "every node starts at the same index", func() bool { return c.Nodes[i].Machine().ChangesFrom() == from })
	}
	lock(2)
	var got *pb.WatchChanges
	for got == nil {
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		got = r.GetChanges()
	}
	// Resumed on the third node from the snapshot: the same change.
	st2, err := pb.NewLocksClient(rawConn(t, c.Addrs()[other])).Watch(ctx, &pb.WatchRequest{Namespace: "s", FromIndex: at})
	if err != nil {
		t.Fatal(err)
	}
	for {
		r, err := st2.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.GetChanges() != nil {
			if r.GetChanges().GetIndex() != got.GetIndex() {
				t.Fatalf("resumed on node %d: change at %d, the first watch got %d", other, r.GetChanges().GetIndex(), got.GetIndex())
			}
			break
		}
	}
	// From before the start: COMPACTED, naming it.
	for i := range 3 {
		st, err := pb.NewLocksClient(rawConn(t, c.Addrs()[i])).Watch(ctx, &pb.WatchRequest{Namespace: "s", FromIndex: last})
		if err == nil {
			_, err = st.Recv()
		}
		if status.Code(err) != codes.OutOfRange || errReason(err) != pb.ErrorReason_COMPACTED.String() || errMeta(err)["oldest_index"] != strconv.FormatUint(from, 10) {
			t.Fatalf("node %d: a resume from %d, before the changes start: %v (%v); want COMPACTED naming %d", i, last, err, errMeta(err), from)
		}
	}
}

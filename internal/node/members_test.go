package node_test

import (
	"context"
	"net"
	"testing"
	"time"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
)

// A member that never recorded its API address (it died before it could)
// has nothing for the leader's probe to call. Raft's heartbeats still tell
// that it does not answer: members shows it unreachable, not unknown.
// Before, it showed "unknown" for as long as it was a member.
func TestMemberWithoutAPIAddressShowsUnreachable(t *testing.T) {
	c := nodetest.Start(t, 3, nodetest.Options{Quiet: true})
	// A raft address where nothing listens.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ghostRaft := l.Addr().String()
	l.Close()
	cl := pb.NewClusterClient(rawConn(t, c.Addrs()[0]))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Joined as raft sees it, with no API address recorded.
	if _, err := cl.Join(ctx, &pb.JoinRequest{Id: "ghost", RaftAddr: ghostRaft}); err != nil {
		t.Fatalf("join: %v", err)
	}
	var ghost *pb.Member
	c.WaitFor(15*time.Second, "the member without an API address to show unreachable", func() bool {
		r, err := cl.Members(ctx, &pb.MembersRequest{})
		if err != nil {
			return false
		}
		for _, m := range r.Members {
			if m.Id == "ghost" {
				ghost = m
				return m.Probed && !m.Reachable
			}
		}
		return false
	})
	if ghost.GrpcAddr != "" {
		t.Fatalf("the ghost member has an API address %q: the test does not test what it says", ghost.GrpcAddr)
	}
	if ghost.SinceContact == nil {
		t.Fatalf("the unreachable member carries no time since its last contact: %v", ghost)
	}
}

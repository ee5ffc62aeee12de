package server

import (
	"context"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/raftnode"
)

// The heartbeat path is session liveness's (session/DESIGN.md): the
// stream's heartbeats call s.live.Heartbeat, and the Cluster.Touch handler
// (cluster.go) s.live.Renew. What is here carries a follower's batch to the
// leader over gRPC and tells the stream whether any leader is known.

// forwarder sends a follower's batch of heartbeats to the leader's Touch.
type forwarder struct{ s *Server }

func (f forwarder) Touch(ctx context.Context, ids []uint64) ([]uint64, error) {
	cc, err := f.s.leaderConn(ctx, f.s.notLeader())
	if err != nil {
		return nil, err
	}
	resp, err := pb.NewClusterClient(cc).Touch(f.s.forwardContext(ctx), &pb.TouchRequest{SessionIds: ids})
	if err != nil {
		return nil, err
	}
	return resp.Unknown, nil
}

// knowsLeader says whether this node knows a leader, itself or another,
// that a heartbeat could renew a session through.
func (s *Server) knowsLeader() bool {
	node := s.replica()
	if node == nil {
		return false
	}
	id, _ := node.Leader()
	return id != ""
}

func (s *Server) notLeader() error {
	node := s.replica()
	if node == nil {
		return raftnode.ErrShutdown
	}
	id, addr := node.Leader()
	if id == s.cfg.Self.ID {
		id, addr = "", ""
	}
	return &raftnode.NotLeaderError{LeaderID: id, LeaderAddr: addr}
}

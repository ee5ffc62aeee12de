package server

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/raftnode"
)

// The heartbeat path is session liveness's (session/DESIGN.md): the
// stream's heartbeats call s.live.Heartbeat, and the Cluster.Touch handler
// (cluster.go) s.live.Renew. What is here carries a follower's batch to the
// leader over gRPC and tells the stream whether any leader is known.

// forwarder sends a follower's batch of heartbeats to the leader's Touch.
type forwarder struct{ s *Server }

// The leader's moved list (sessions it refused because their slot moves)
// is passed on as it came: the batcher answers those heartbeats ErrMoved,
// and their streams end MOVING (stream.go), never "closed".
func (f forwarder) Touch(ctx context.Context, ids []uint64) (unknown, moved []uint64, err error) {
	cc, err := f.s.leaderConn(ctx, f.s.notLeader())
	if err != nil {
		return nil, nil, err
	}
	resp, err := pb.NewClusterClient(cc).Touch(f.s.forwardContext(ctx), &pb.TouchRequest{SessionIds: ids})
	if status.Code(err) == codes.PermissionDenied {
		f.s.warnRefused(err) // member.go
	}
	if err != nil {
		return nil, nil, err
	}
	return resp.Unknown, resp.Moved, nil
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

// noLeaderGrace is how long a node must have known no leader before it
// ends session streams for it, so that their clients move to a node that
// can renew them. An election takes about a second (raft's timeouts are
// 500 ms). Ending every stream at the first heartbeat of an election
// (6c1ad30) made all of a node's clients re-attach at once, to nodes that
// knew no leader either: with 10,000 sessions on 2 cores that storm kept
// each new leader from reaching a quorum within its lease, and elections
// went on for a minute (issue 21). A node cut off from the leader still
// ends its streams within the grace plus a heartbeat interval, well
// before the client's own TTL/3 limit without acknowledgements.
const noLeaderGrace = 2 * time.Second

// leaderless remembers since when this node has known no leader. It is
// updated by whoever asks (every heartbeat's answer), on the server's
// clock.
type leaderless struct{ since atomic.Int64 } // unix ns; 0: a leader is known

// watchLeaderless notes every 100 ms whether this node knows a leader, so
// that leaderlessFor counts from when the leader was lost, not from the
// first heartbeat after.
func (s *Server) watchLeaderless(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.leaderlessFor()
		}
	}
}

// leaderlessFor returns how long this node has known no leader (0 while
// it knows one).
func (s *Server) leaderlessFor() time.Duration {
	if s.knowsLeader() {
		s.leaderless.since.Store(0)
		return 0
	}
	now := s.cfg.Now().UnixNano()
	s.leaderless.since.CompareAndSwap(0, now)
	return time.Duration(now - s.leaderless.since.Load())
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

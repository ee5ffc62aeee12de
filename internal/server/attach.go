package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/rpcerr"
	"github.com/lockcluster/lockcluster/raftnode"
)

// attachWait bounds the attach's waits for this node's state: for the
// index the client has seen, and for a session it does not know yet.
const attachWait = 5 * time.Second

// checkAttach decides whether the attach may bind its stream to its
// session, as a unary call of the session is decided (admit.go's
// checkSecret): a session this node knows is decided here; one it does not
// know is decided after a read barrier on the leader. A follower cannot
// forward the stream, so it does what the leader's barrier would have
// done for it: it asks the leader how far the leader has applied (Status,
// forwarded as calls are), waits until it has applied as much itself,
// and decides. A session opened on the leader, even a moment before the
// attach and without min_index, is then known here; one that is still
// unknown was never opened (or has ended) and is refused as on the
// leader.
//
// If the leader cannot be asked (none known, unreachable, or the node it
// names no longer leads), or this node does not catch up within the
// attach's wait, the answer is a retryable NOT_READY, never a refusal:
// this node cannot tell a bad secret from a session it has not seen yet.
//
// The leader's applied index covers every session it has answered an
// OpenSession for. Right after an election, before the new leader has
// applied its predecessor's last entries, it may not; an attach then
// still gets the refusal a client with no min_index got before. A client
// that sends min_index (the Go client does) never depends on this.
func (s *Server) checkAttach(ctx context.Context, at *pb.Attach) error {
	err := s.checkSecret(ctx, at.SessionId, at.Namespace, at.SessionSecret)
	if err == nil || !errors.Is(err, raftnode.ErrNotLeader) {
		return toStatus(err)
	}
	index, err := s.leaderApplied(ctx, err)
	if err != nil {
		return s.attachNotReady(at, fmt.Sprintf("could not ask the leader how far it has applied: %v", err))
	}
	if err := s.hub.waitApplied(ctx, index); err != nil { // Status's applied index: raw
		return s.attachNotReady(at, fmt.Sprintf("it has not yet applied index %d that the leader has", index))
	}
	return errOrNil(s.m.CheckSession(at.SessionId, at.Namespace, at.SessionSecret))
}

// leaderApplied asks the leader that notLeader names for its applied index.
func (s *Server) leaderApplied(ctx context.Context, notLeader error) (uint64, error) {
	st, err := forward(s, ctx, notLeader, func(ctx context.Context, cc *grpc.ClientConn) (*pb.StatusResponse, error) {
		return pb.NewClusterClient(cc).Status(ctx, &pb.StatusRequest{})
	})
	if err != nil {
		return 0, err
	}
	if st.GetState() != "Leader" {
		return 0, fmt.Errorf("node %s, named leader, is %s", st.GetNodeId(), st.GetState())
	}
	return st.GetAppliedIndex(), nil
}

func (s *Server) attachNotReady(at *pb.Attach, why string) error {
	err := toStatus(fmt.Errorf("%w: node %s does not know session %d yet and %s", rpcerr.ErrNotReady, s.cfg.Self.ID, at.SessionId, why))
	return rpcerr.WithRetryDelay(err, attachRetryMin)
}

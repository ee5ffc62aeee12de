package server

import (
	"context"

	"google.golang.org/grpc"
)

// LeaderConn is a connection to the node that leads this server's group,
// and the context to call it with (the forwarding marks of forward.go),
// for a call the node's router forwards itself (MoveSlots: the move
// begins in the source group's log). It fails, with the status a client
// retries (NOT_LEADER), when this node leads the group, no leader is
// known, or ctx is a forwarded call's already (one hop only).
func (s *Server) LeaderConn(ctx context.Context) (*grpc.ClientConn, context.Context, error) {
	cc, err := s.leaderConn(ctx, s.notLeader())
	if err != nil {
		return nil, nil, toStatus(err)
	}
	return cc, s.forwardContext(ctx), nil
}

// LeaderGRPC is the id of the member that leads this server's group, as
// this node knows it, and its client API address from the member
// directory ("" when either is unknown).
func (s *Server) LeaderGRPC() (id, addr string) {
	node := s.replica()
	if node == nil {
		return "", ""
	}
	id, _ = node.Leader()
	if id == "" {
		return "", ""
	}
	for _, m := range s.dir.Members() {
		if m.ID == id {
			return id, m.GRPCAddr
		}
	}
	return id, ""
}

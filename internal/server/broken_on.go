//go:build jepsenbroken

package server

import (
	"time"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// THIS BUILD IS BROKEN ON PURPOSE. With the build tag jepsenbroken, a
// follower answers exclusive requests sent to it from its own state, as a
// node that wrongly believes it leads would: it grants at once, with its
// last applied index as the fencing token, without the leader and without
// looking at who holds the lock. The chaos harness (test/jepsen-lite) runs
// against such a build to show that its checkers catch the violations.
// Never ship a binary built with this tag.
func (s *Server) brokenGrant(req *pb.LockRequest) (*pb.LockResponse, bool) {
	node := s.replica()
	if node == nil || node.IsLeader() || req.Mode != pb.Mode_MODE_EXCLUSIVE || req.Steal || req.IfAvailable {
		return nil, false
	}
	idx := s.m.LastLogical()
	return &pb.LockResponse{Status: pb.Status_STATUS_GRANTED, Token: idx, AcquiredAt: ts(time.Now().UnixNano()), Index: idx}, true
}

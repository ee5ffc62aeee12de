package server

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"google.golang.org/grpc"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/rpcerr"
	"github.com/lockcluster/lockcluster/internal/version"
)

// Status is this node's own view: raft's state and indexes, the lock
// manager's counts, and why it is unfit to serve, if it is. It answers
// while the node is fenced (fence.go), and reads no lock state.
func (s *Server) Status(ctx context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error) {
	node := s.replica()
	if node == nil {
		return nil, toStatus(fmt.Errorf("%w: node is starting", rpcerr.ErrNotReady))
	}
	s.heardNoPromote(ctx, req) // learner.go
	st := node.Stats()
	u := func(k string) uint64 { v, _ := strconv.ParseUint(st[k], 10, 64); return v }
	leaderID, _ := node.Leader()
	fs := s.m.Stats()
	var clusterLevel uint32
	if v := s.clusterLevel(); v.known { // level.go
		clusterLevel = uint32(v.level)
	}
	return &pb.StatusResponse{
		NodeId: s.cfg.Self.ID, State: node.State(), LeaderId: leaderID, LeaderAddr: s.grpcAddrOf(leaderID),
		Term: u("term"), CommitIndex: u("commit_index"), AppliedIndex: node.AppliedIndex(), LastIndex: node.LastIndex(),
		Sessions: uint64(fs.Sessions), Held: uint64(fs.Held), Pending: uint64(fs.Pending), Namespaces: uint64(fs.Namespaces),
		Version: version.Current().Version, Unfit: unfitText(node),
		ProtocolLevel: uint32(s.ownLevel()), ClusterLevel: clusterLevel,
	}, nil
}

// unfitText is why replica r may not serve clients ("" while it may).
func unfitText(r Replica) string {
	if err := r.Unfit(); err != nil {
		return err.Error()
	}
	return ""
}

func (s *Server) grpcAddrOf(id string) string { return s.members.grpcAddr(id) }

// The membership calls are thin wrappers over membership.go, which owns
// join, leave and the member directory.

// Members lists the raft configuration with the member directory's
// addresses and, from the leader, what its probes saw of each member
// (probe.go). A follower forwards the call to the leader; if no leader
// answers, it lists the configuration as it knows it, unprobed.
func (s *Server) Members(ctx context.Context, req *pb.MembersRequest) (*pb.MembersResponse, error) {
	r := s.replica()
	if r == nil {
		return nil, toStatus(fmt.Errorf("%w: node is starting", rpcerr.ErrNotReady))
	}
	if !r.IsLeader() {
		resp, err := forward(s, ctx, s.notLeader(), func(ctx context.Context, cc *grpc.ClientConn) (*pb.MembersResponse, error) {
			return pb.NewClusterClient(cc).Members(ctx, req)
		})
		if err == nil {
			return resp, nil
		}
	}
	resp, err := s.members.list(r)
	if err != nil {
		return nil, toStatus(err)
	}
	return resp, nil
}

// Join adds a voter and records it in the member directory (with
// record_only, records a member only), on the leader.
func (s *Server) Join(ctx context.Context, req *pb.JoinRequest) (*pb.JoinResponse, error) {
	if req.Id == "" || req.RaftAddr == "" {
		return nil, invalid("join needs a node id and its raft address")
	}
	resp, err := s.members.join(ctx, req)
	if err != nil {
		return forward(s, ctx, err, func(ctx context.Context, cc *grpc.ClientConn) (*pb.JoinResponse, error) {
			return pb.NewClusterClient(cc).Join(ctx, req)
		})
	}
	return resp, nil
}

// Leave removes a member and its directory record, on the leader. It is
// safe to retry from any point; an id that is in neither the configuration
// nor the directory is NOT_MEMBER, naming the members.
func (s *Server) Leave(ctx context.Context, req *pb.LeaveRequest) (*pb.LeaveResponse, error) {
	if req.Id == "" {
		return nil, invalid("leave needs a node id")
	}
	if err := s.members.leave(ctx, req.Id); err != nil {
		return forward(s, ctx, err, func(ctx context.Context, cc *grpc.ClientConn) (*pb.LeaveResponse, error) {
			return pb.NewClusterClient(cc).Leave(ctx, req)
		})
	}
	return &pb.LeaveResponse{}, nil
}

// Promote makes a learner a voter, on the leader (learner.go): it refuses
// one that the leader's probes do not see caught up, unless forced.
func (s *Server) Promote(ctx context.Context, req *pb.PromoteRequest) (*pb.PromoteResponse, error) {
	if req.Id == "" {
		return nil, invalid("promote needs a node id")
	}
	resp, err := s.members.promote(ctx, req)
	if err != nil {
		return forward(s, ctx, err, func(ctx context.Context, cc *grpc.ClientConn) (*pb.PromoteResponse, error) {
			return pb.NewClusterClient(cc).Promote(ctx, req)
		})
	}
	return resp, nil
}

// Touch renews the deadlines of sessions whose heartbeats reached a
// follower (session liveness's Renew). Only the leader answers, once it
// has re-armed, and only to a member (member.go).
//
// Ownership comes first and last (groups.go; groups.md I3, §8.2 rule 1).
// A session whose slot this group does not serve is not renewed; one
// whose slot it no longer serves once Renew returns, which is after the
// confirmation of leadership that covers the renewal, is not
// acknowledged. Both are answered in moved, never in unknown: unknown
// ends the client's session, moved ends its stream MOVING and the client
// re-attaches to the group that serves it. Checking only before the
// renewal would not do: a Freeze applied between the renewal and the
// confirmation would let this group acknowledge a heartbeat after the
// target armed the session, and the client's J pass the target's E. With
// one group nothing is ever moved, and the checks cost one read lock per
// batch.
func (s *Server) Touch(ctx context.Context, req *pb.TouchRequest) (*pb.TouchResponse, error) {
	if err := s.memberOnly(ctx, "Cluster.Touch"); err != nil { // member.go
		return nil, err
	}
	lost := s.m.SlotsLost()
	ids, refused := s.ownedSessions(req.SessionIds)
	unknown, err := s.live.Renew(ctx, ids...)
	if err != nil {
		return nil, toStatus(s.notLeader())
	}
	// After the confirmation: a slot frozen meanwhile refuses its
	// sessions here, renewed or not (a Freeze drops their deadlines, so
	// they may come back unknown): moved, not unknown. If the slot was
	// dropped too (a whole move can fit in a slow confirmation round) the
	// machine no longer knows its sessions: when this group lost a slot
	// meanwhile (SlotsLost, counted with the entry, so read after the
	// state it covers), a session it does not know is not taken for
	// renewed, nor for ended, but answered moved too. A session that
	// merely ended meanwhile then ends at its client's next attach, a
	// little later.
	var late []uint64
	if s.m.SlotsLost() != lost { // none lost: the first check holds (none with one group)
		late = s.m.UnservedSessions(ids)
	}
	if len(late) > 0 {
		if len(unknown) > 0 {
			set := make(map[uint64]bool, len(late)) // a whole slot's may be here
			for _, id := range late {
				set[id] = true
			}
			unknown = slices.DeleteFunc(unknown, func(id uint64) bool { return set[id] })
		}
		refused = append(refused, late...)
	}
	return &pb.TouchResponse{Unknown: unknown, Moved: refused}, nil
}

package server

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"google.golang.org/grpc"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/rpcerr"
	"github.com/lockcluster/lockcluster/internal/version"
	"github.com/lockcluster/lockcluster/raftnode"
)

// Status is this node's own view: raft's state and indexes, the lock
// manager's counts, and why it is unfit to serve, if it is. It answers
// while the node is fenced (fence.go), and reads no lock state.
func (s *Server) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	node := s.replica()
	if node == nil {
		return nil, toStatus(fmt.Errorf("%w: node is starting", rpcerr.ErrNotReady))
	}
	st := node.Stats()
	u := func(k string) uint64 { v, _ := strconv.ParseUint(st[k], 10, 64); return v }
	leaderID, _ := node.Leader()
	fs := s.m.Stats()
	return &pb.StatusResponse{
		NodeId: s.cfg.Self.ID, State: node.State(), LeaderId: leaderID, LeaderAddr: s.grpcAddrOf(leaderID),
		Term: u("term"), CommitIndex: u("commit_index"), AppliedIndex: node.AppliedIndex(), LastIndex: node.LastIndex(),
		Sessions: uint64(fs.Sessions), Held: uint64(fs.Held), Pending: uint64(fs.Pending), Namespaces: uint64(fs.Namespaces),
		Version: version.Current().Version, Unfit: unfitText(node),
	}, nil
}

// unfitText is why replica r may not serve clients ("" while it may).
func unfitText(r Replica) string {
	if err := r.Unfit(); err != nil {
		return err.Error()
	}
	return ""
}

func (s *Server) grpcAddrOf(id string) string {
	for _, m := range s.m.Members() {
		if m.ID == id {
			return m.GRPCAddr
		}
	}
	return ""
}

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
	ms, err := r.Members()
	if err != nil {
		return nil, toStatus(err)
	}
	dir := map[string]fsm.Member{}
	for _, m := range s.m.Members() {
		dir[m.ID] = m
	}
	leading := r.IsLeader()
	out := &pb.MembersResponse{}
	for _, m := range ms {
		d := dir[m.ID]
		pm := &pb.Member{Id: m.ID, RaftAddr: m.Addr, GrpcAddr: d.GRPCAddr, HttpAddr: d.HTTPAddr, Suffrage: m.Suffrage, Leader: m.Leader}
		if leading {
			s.describe(pm)
		}
		out.Members = append(out.Members, pm)
	}
	return out, nil
}

func (s *Server) Join(ctx context.Context, req *pb.JoinRequest) (*pb.JoinResponse, error) {
	if req.Id == "" || req.RaftAddr == "" {
		return nil, invalid("join needs a node id and its raft address")
	}
	resp, err := s.join(ctx, req)
	if err != nil {
		return forward(s, ctx, err, func(ctx context.Context, cc *grpc.ClientConn) (*pb.JoinResponse, error) {
			return pb.NewClusterClient(cc).Join(ctx, req)
		})
	}
	return resp, nil
}

// join adds the voter and records it in the member directory, on the
// leader; with record_only, it records a member only.
func (s *Server) join(ctx context.Context, req *pb.JoinRequest) (*pb.JoinResponse, error) {
	node := s.replica()
	if req.RecordOnly {
		if !node.IsLeader() {
			return nil, s.notLeader()
		}
		ms, err := node.Members()
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(ms, func(m raftnode.Member) bool { return m.ID == req.Id }) {
			return nil, fmt.Errorf("%w: %s is not a member (removed by leave?): not recording it", raftnode.ErrNotMember, req.Id)
		}
	} else if err := node.Join(ctx, req.Id, req.RaftAddr); err != nil {
		return nil, err
	}
	m := fsm.Member{ID: req.Id, RaftAddr: req.RaftAddr, GRPCAddr: req.GrpcAddr, HTTPAddr: req.HttpAddr}
	if err := s.setMember(ctx, m, false); err != nil {
		return nil, err
	}
	resp := &pb.JoinResponse{}
	if ms, err := node.Members(); err == nil {
		for _, m := range ms {
			if m.Suffrage == "Voter" {
				resp.Voters++
			}
		}
	}
	resp.Warning = evenVoters(resp.Voters)
	s.log.Info("member joined", "id", req.Id, "raft", req.RaftAddr, "grpc", req.GrpcAddr, "voters", resp.Voters)
	if resp.Warning != "" {
		s.log.Warn(resp.Warning)
	}
	return resp, nil
}

// evenVoters warns of an even number of voters, as etcd's docs do: n even
// tolerates as many failures as n-1, with a larger quorum to reach.
func evenVoters(n uint32) string {
	if n == 0 || n%2 != 0 {
		return ""
	}
	return fmt.Sprintf("the cluster now has %d voters: an even count tolerates no more failures than %d voters (%d) and needs a majority of %d; add or remove one voter", n, n-1, (n-1)/2, n/2+1)
}

func (s *Server) Leave(ctx context.Context, req *pb.LeaveRequest) (*pb.LeaveResponse, error) {
	if req.Id == "" {
		return nil, invalid("leave needs a node id")
	}
	err := s.replica().Leave(ctx, req.Id)
	if err == nil {
		err = s.setMember(ctx, fsm.Member{ID: req.Id}, true)
	}
	if err != nil {
		return forward(s, ctx, err, func(ctx context.Context, cc *grpc.ClientConn) (*pb.LeaveResponse, error) {
			return pb.NewClusterClient(cc).Leave(ctx, req)
		})
	}
	s.log.Info("member removed", "id", req.Id)
	return &pb.LeaveResponse{}, nil
}

// Touch renews the deadlines of sessions whose heartbeats reached a
// follower (session liveness's Renew). Only the leader answers, once it
// has re-armed.
func (s *Server) Touch(ctx context.Context, req *pb.TouchRequest) (*pb.TouchResponse, error) {
	unknown, err := s.live.Renew(ctx, req.SessionIds...)
	if err != nil {
		return nil, toStatus(s.notLeader())
	}
	return &pb.TouchResponse{Unknown: unknown}, nil
}

package node

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/rpcerr"
	"github.com/lockcluster/lockcluster/internal/server"
)

// router serves lockcluster.v1 for a node of several groups (groups.md
// §10.4): each call goes to the server of the group that serves its
// namespace's slot (spreadGroup: the static spread of phase 3), a
// renewal to the group of each session id (its top 16 bits), and the
// cluster's own calls (status, members, membership) to group 0, which
// holds the member directory. The group's divergence fence is checked
// here, per group, not by the process-wide interceptors: a replica of
// one group that is unfit refuses that group's calls only (§10.5).
//
// The router only routes (I1): the group's state machine refuses a
// namespace whose slot it does not own, retryably (MOVING), so a call
// routed before the spread reached a replica is retried by the client.
type router struct {
	pb.UnimplementedLocksServer
	pb.UnimplementedClusterServer
	groups []*group
}

// group is the group that serves namespace ns.
func (r *router) group(ns string) *group { return r.groups[SpreadGroup(ns, len(r.groups))] }

// of returns the group that serves namespace ns, or the group's fence.
func (r *router) of(ns string) (*group, error) {
	g := r.group(ns)
	return g, server.FenceError(g.raft.Unfit)
}

func (r *router) zero() (*group, error) {
	g := r.groups[0]
	return g, server.FenceError(g.raft.Unfit)
}

// unsupported refuses a call that a cluster of several groups does not
// take yet (phase 4 of issue 27 brings them).
func unsupported(what string) error {
	return rpcerr.New(codes.FailedPrecondition, pb.ErrorReason_NOT_SUPPORTED, "NotSupportedError",
		what+" is not supported yet on a cluster of several Raft groups (serve --groups): it comes with online moves (issue 27, phase 4)", nil)
}

func (r *router) OpenSession(ctx context.Context, req *pb.OpenSessionRequest) (*pb.OpenSessionResponse, error) {
	g, err := r.of(req.GetNamespace())
	if err != nil {
		return nil, err
	}
	return g.srv.OpenSession(ctx, req)
}

func (r *router) CloseSession(ctx context.Context, req *pb.CloseSessionRequest) (*pb.CloseSessionResponse, error) {
	g, err := r.of(req.GetNamespace())
	if err != nil {
		return nil, err
	}
	return g.srv.CloseSession(ctx, req)
}

func (r *router) Request(ctx context.Context, req *pb.LockRequest) (*pb.LockResponse, error) {
	g, err := r.of(req.GetNamespace())
	if err != nil {
		return nil, err
	}
	return g.srv.Request(ctx, req)
}

func (r *router) Release(ctx context.Context, req *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
	g, err := r.of(req.GetNamespace())
	if err != nil {
		return nil, err
	}
	return g.srv.Release(ctx, req)
}

func (r *router) Abort(ctx context.Context, req *pb.AbortRequest) (*pb.AbortResponse, error) {
	g, err := r.of(req.GetNamespace())
	if err != nil {
		return nil, err
	}
	return g.srv.Abort(ctx, req)
}

func (r *router) Query(ctx context.Context, req *pb.QueryRequest) (*pb.QueryResponse, error) {
	g, err := r.of(req.GetNamespace())
	if err != nil {
		return nil, err
	}
	return g.srv.Query(ctx, req)
}

func (r *router) SetRecord(ctx context.Context, req *pb.SetRecordRequest) (*pb.SetRecordResponse, error) {
	g, err := r.of(req.GetNamespace())
	if err != nil {
		return nil, err
	}
	return g.srv.SetRecord(ctx, req)
}

func (r *router) GetRecord(ctx context.Context, req *pb.GetRecordRequest) (*pb.GetRecordResponse, error) {
	g, err := r.of(req.GetNamespace())
	if err != nil {
		return nil, err
	}
	return g.srv.GetRecord(ctx, req)
}

// fenceStream runs handler under group g's stream fence: refused while g
// is unfit, ended when g is fenced (server.FenceStream).
func fenceStream(g *group, ss grpc.ServerStream, method string, handler func(grpc.ServerStream) error) error {
	return server.FenceStream(g.raft.Unfit, g.raft.Fenced)(nil, ss, &grpc.StreamServerInfo{FullMethod: method},
		func(_ any, s grpc.ServerStream) error { return handler(s) })
}

func (r *router) QueryPages(req *pb.QueryRequest, stream grpc.ServerStreamingServer[pb.QueryResponse]) error {
	g := r.group(req.GetNamespace())
	return fenceStream(g, stream, pb.Locks_QueryPages_FullMethodName, func(s grpc.ServerStream) error {
		return g.srv.QueryPages(req, &grpc.GenericServerStream[pb.QueryRequest, pb.QueryResponse]{ServerStream: s})
	})
}

func (r *router) Watch(req *pb.WatchRequest, stream grpc.ServerStreamingServer[pb.WatchResponse]) error {
	g := r.group(req.GetNamespace())
	return fenceStream(g, stream, pb.Locks_Watch_FullMethodName, func(s grpc.ServerStream) error {
		return g.srv.Watch(req, &grpc.GenericServerStream[pb.WatchRequest, pb.WatchResponse]{ServerStream: s})
	})
}

// Session reads the stream's first message (the attach, which names the
// namespace) to pick the group, and hands the stream to its server with
// that message replayed.
func (r *router) Session(stream pb.Locks_SessionServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	g := r.group(first.GetAttach().GetNamespace())
	return fenceStream(g, stream, pb.Locks_Session_FullMethodName, func(s grpc.ServerStream) error {
		return g.srv.Session(&replayedStream{ServerStream: s, first: first})
	})
}

// replayedStream is a session stream whose first message was read already.
type replayedStream struct {
	grpc.ServerStream
	first *pb.SessionUp
}

func (s *replayedStream) Recv() (*pb.SessionUp, error) {
	if m := s.first; m != nil {
		s.first = nil
		return m, nil
	}
	m := new(pb.SessionUp)
	if err := s.RecvMsg(m); err != nil {
		return nil, err
	}
	return m, nil
}

func (s *replayedStream) Send(m *pb.SessionDown) error { return s.SendMsg(m) }

// Touch splits the renewals by the group of each session id (a follower's
// server sends its own group's only; a caller may mix them) and answers
// the union of the groups' unknown sessions and of their moved ones
// (refused because their slot moves, groups.md §8.2): a moved session
// dropped here would read as renewed to the follower, which would
// acknowledge its heartbeat (I3).
func (r *router) Touch(ctx context.Context, req *pb.TouchRequest) (*pb.TouchResponse, error) {
	byGroup := map[uint16][]uint64{}
	for _, id := range req.GetSessionIds() {
		g := uint16(id >> 48)
		byGroup[g] = append(byGroup[g], id)
	}
	out := &pb.TouchResponse{}
	for gid, ids := range byGroup {
		if int(gid) >= len(r.groups) {
			out.Unknown = append(out.Unknown, ids...) // no such group: no such session
			continue
		}
		g := r.groups[gid]
		if err := server.FenceError(g.raft.Unfit); err != nil {
			return nil, err
		}
		sub := req
		if len(byGroup) > 1 {
			sub = &pb.TouchRequest{SessionIds: ids}
		}
		resp, err := g.srv.Touch(ctx, sub)
		if err != nil {
			return nil, err
		}
		out.Unknown = append(out.Unknown, resp.GetUnknown()...)
		out.Moved = append(out.Moved, resp.GetMoved()...)
	}
	return out, nil
}

// Status is group 0's, with every group's replica listed and the counts
// summed over them; it answers even when a group is unfit (fence.go).
func (r *router) Status(ctx context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error) {
	out, err := r.groups[0].srv.Status(ctx, req)
	if err != nil {
		return nil, err
	}
	zero := proto.Clone(out).(*pb.StatusResponse) // its counts: group 0's
	out.Sessions, out.Held, out.Pending, out.Namespaces = 0, 0, 0, 0
	for _, g := range r.groups {
		st := zero
		if g.id != 0 {
			if st, err = g.srv.Status(ctx, req); err != nil {
				return nil, err
			}
		}
		out.Sessions += st.Sessions
		out.Held += st.Held
		out.Pending += st.Pending
		out.Namespaces += st.Namespaces
		out.Groups = append(out.Groups, &pb.GroupStatus{Group: uint32(g.id), State: st.State, LeaderId: st.LeaderId, Term: st.Term,
			CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex, Slots: uint32(g.machine.OwnedSlots()),
			Sessions: st.Sessions, Held: st.Held, Pending: st.Pending, Unfit: st.Unfit})
	}
	return out, nil
}

func (r *router) Members(ctx context.Context, req *pb.MembersRequest) (*pb.MembersResponse, error) {
	g, err := r.zero()
	if err != nil {
		return nil, err
	}
	return g.srv.Members(ctx, req)
}

// Join takes only a member's own record (record_only, which every
// follower sends to the leader at start): adding a node to every group is
// phase 4's.
func (r *router) Join(ctx context.Context, req *pb.JoinRequest) (*pb.JoinResponse, error) {
	g, err := r.zero()
	if err != nil {
		return nil, err
	}
	if !req.GetRecordOnly() {
		return nil, unsupported("adding a node (join)")
	}
	return g.srv.Join(ctx, req)
}

func (r *router) Leave(context.Context, *pb.LeaveRequest) (*pb.LeaveResponse, error) {
	return nil, unsupported("removing a node (leave)")
}

func (r *router) Promote(context.Context, *pb.PromoteRequest) (*pb.PromoteResponse, error) {
	return nil, unsupported("promoting a learner")
}

func (r *router) SaveSnapshot(*pb.SaveSnapshotRequest, grpc.ServerStreamingServer[pb.SnapshotChunk]) error {
	return unsupported("a backup (snapshot save)")
}

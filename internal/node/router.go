package node

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
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
	routes *routes
	node   *Node
}

// routed runs call on the group that serves namespace ns (routes.go),
// under the group's fence. A group that refuses the namespace's slot
// (MOVING, MOVED: nothing was applied) is not the caller's problem while
// the slot moves: the call is parked until this node's replicas show
// the slot's new owner, and runs there (groups.md §11), for at most
// parkFor; then the refusal goes back, which clients retry.
func routed[T any](ctx context.Context, r *router, ns string, call func(*group) (T, error)) (T, error) {
	slot := fsm.Slot(ns)
	g := r.routes.cached(slot)
	var deadline time.Time
	for {
		if err := server.FenceError(g.raft.Unfit); err != nil {
			var zero T
			return zero, err
		}
		out, err := call(g)
		if err == nil || !rpcerr.IsSlotRefusal(err) {
			return out, err
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(parkFor)
		}
		next := r.routes.park(ctx, slot, g, deadline)
		if next == nil {
			return out, err
		}
		g = next
	}
}

// streamGroup is the group a stream of namespace ns starts on: the
// settled owner of its slot, waited for (park) while the slot moves.
func (r *router) streamGroup(ctx context.Context, ns string) *group {
	slot := fsm.Slot(ns)
	if g, ok := r.routes.resolve(slot); ok {
		return g
	}
	if g := r.routes.park(ctx, slot, nil, time.Now().Add(parkFor)); g != nil {
		return g
	}
	return r.routes.cached(slot)
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
	return routed(ctx, r, req.GetNamespace(), func(g *group) (*pb.OpenSessionResponse, error) { return g.srv.OpenSession(ctx, req) })
}

func (r *router) CloseSession(ctx context.Context, req *pb.CloseSessionRequest) (*pb.CloseSessionResponse, error) {
	return routed(ctx, r, req.GetNamespace(), func(g *group) (*pb.CloseSessionResponse, error) { return g.srv.CloseSession(ctx, req) })
}

func (r *router) Request(ctx context.Context, req *pb.LockRequest) (*pb.LockResponse, error) {
	return routed(ctx, r, req.GetNamespace(), func(g *group) (*pb.LockResponse, error) { return g.srv.Request(ctx, req) })
}

func (r *router) Release(ctx context.Context, req *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
	return routed(ctx, r, req.GetNamespace(), func(g *group) (*pb.ReleaseResponse, error) { return g.srv.Release(ctx, req) })
}

func (r *router) Abort(ctx context.Context, req *pb.AbortRequest) (*pb.AbortResponse, error) {
	return routed(ctx, r, req.GetNamespace(), func(g *group) (*pb.AbortResponse, error) { return g.srv.Abort(ctx, req) })
}

func (r *router) Query(ctx context.Context, req *pb.QueryRequest) (*pb.QueryResponse, error) {
	return routed(ctx, r, req.GetNamespace(), func(g *group) (*pb.QueryResponse, error) { return g.srv.Query(ctx, req) })
}

func (r *router) SetRecord(ctx context.Context, req *pb.SetRecordRequest) (*pb.SetRecordResponse, error) {
	return routed(ctx, r, req.GetNamespace(), func(g *group) (*pb.SetRecordResponse, error) { return g.srv.SetRecord(ctx, req) })
}

func (r *router) GetRecord(ctx context.Context, req *pb.GetRecordRequest) (*pb.GetRecordResponse, error) {
	return routed(ctx, r, req.GetNamespace(), func(g *group) (*pb.GetRecordResponse, error) { return g.srv.GetRecord(ctx, req) })
}

// fenceStream runs handler under group g's stream fence: refused while g
// is unfit, ended when g is fenced (server.FenceStream).
func fenceStream(g *group, ss grpc.ServerStream, method string, handler func(grpc.ServerStream) error) error {
	return server.FenceStream(g.raft.Unfit, g.raft.Fenced)(nil, ss, &grpc.StreamServerInfo{FullMethod: method},
		func(_ any, s grpc.ServerStream) error { return handler(s) })
}

func (r *router) QueryPages(req *pb.QueryRequest, stream grpc.ServerStreamingServer[pb.QueryResponse]) error {
	g := r.streamGroup(stream.Context(), req.GetNamespace())
	return fenceStream(g, stream, pb.Locks_QueryPages_FullMethodName, func(s grpc.ServerStream) error {
		return g.srv.QueryPages(req, &grpc.GenericServerStream[pb.QueryRequest, pb.QueryResponse]{ServerStream: s})
	})
}

func (r *router) Watch(req *pb.WatchRequest, stream grpc.ServerStreamingServer[pb.WatchResponse]) error {
	g := r.streamGroup(stream.Context(), req.GetNamespace())
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
	g := r.streamGroup(stream.Context(), first.GetAttach().GetNamespace())
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

// Touch splits the renewals by the group that holds each session (a
// follower's server sends its own group's only; a caller may mix them)
// and answers the union of the groups' unknown and moved sessions. A
// session starts in the group of its id's top 16 bits and moves with its
// namespace's slot (groups.md §8.2): sessionGroup finds it. A moved
// session dropped from the answer would read as renewed to the follower,
// which would acknowledge its heartbeat (I3).
func (r *router) Touch(ctx context.Context, req *pb.TouchRequest) (*pb.TouchResponse, error) {
	byGroup := map[*group][]uint64{}
	var order []*group
	for _, id := range req.GetSessionIds() {
		g := r.sessionGroup(id)
		if _, ok := byGroup[g]; !ok {
			order = append(order, g)
		}
		byGroup[g] = append(byGroup[g], id)
	}
	out := &pb.TouchResponse{}
	for _, g := range order {
		ids := byGroup[g]
		if g == nil {
			out.Unknown = append(out.Unknown, ids...) // no such group: no such session
			continue
		}
		if err := server.FenceError(g.raft.Unfit); err != nil {
			return nil, err
		}
		sub := req
		if len(byGroup) > 1 {
			sub = &pb.TouchRequest{SessionIds: ids}
		}
		resp, err := g.srv.Touch(ctx, sub)
		if err != nil {
			if len(byGroup) == 1 {
				return nil, err
			}
			// Sessions this node found in another group than the rest (they
			// moved) whose group does not answer here (not its leader):
			// not renewed; "moved" ends their streams, and their clients
			// re-attach where the slot lives now.
			out.Moved = append(out.Moved, ids...)
			continue
		}
		out.Unknown = append(out.Unknown, resp.GetUnknown()...)
		out.Moved = append(out.Moved, resp.GetMoved()...)
	}
	if len(out.Unknown) > 0 && r.lostSlots() {
		// A session unknown here may have moved with its slot while this
		// node's replica of its new group lags (Freeze, Import and Drop all
		// applied in its old group): "unknown" would end it. Say "moved":
		// its stream ends MOVING, its client re-attaches, and the attach
		// says "closed" if it has in fact ended.
		out.Moved = append(out.Moved, out.Unknown...)
		out.Unknown = nil
	}
	return out, nil
}

// lostSlots reports whether any group on this node ever gave slots away.
func (r *router) lostSlots() bool {
	for _, g := range r.groups {
		if g.machine.SlotsLost() > 0 {
			return true
		}
	}
	return false
}

// sessionGroup is the group that holds session id as this node's
// replicas show it: the group that created it (the id's top 16 bits)
// while that group has it and serves its slot, else a group whose replica
// has it and serves it, else one that has it (frozen: it answers moved),
// else the creating group (it answers unknown); nil for an id of no
// group.
func (r *router) sessionGroup(id uint64) *group {
	home := int(id >> 48)
	if home >= len(r.groups) {
		return nil
	}
	if has, serves := r.groups[home].machine.HoldsSession(id); has && serves {
		return r.groups[home]
	}
	var holder *group
	for _, g := range r.groups {
		has, serves := g.machine.HoldsSession(id)
		if !has {
			continue
		}
		if serves {
			return g
		}
		if holder == nil {
			holder = g
		}
	}
	if holder != nil {
		return holder
	}
	return r.groups[home]
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

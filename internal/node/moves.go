package node

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/rpcerr"
	"github.com/lockcluster/lockcluster/internal/server"
)

// MoveSlots begins a move of slots to another group (groups.md §12): it
// checks the slots against this node's replicas (all served by one group
// A, none moving, the target another group), and proposes A's Freeze at
// an epoch above every slot's, on A's leader (forwarded there when it is
// another node). The mover (mover.go) on every node does the rest.
func (r *router) MoveSlots(ctx context.Context, req *pb.MoveSlotsRequest) (*pb.MoveSlotsResponse, error) {
	slots, to, err := r.checkMove(req)
	if err != nil {
		return nil, err
	}
	var from *group
	var epoch uint32
	for _, s := range slots {
		g, settled := r.routes.resolve(s)
		if !settled {
			return nil, rpcerr.New(codes.FailedPrecondition, pb.ErrorReason_NOT_READY, "InvalidStateError",
				fmt.Sprintf("slot %d is moving already: wait until 'lockcluster placement --slot %d' shows it settled", s, s), nil)
		}
		if from != nil && g != from {
			return nil, rpcerr.Invalid(fmt.Sprintf("slots %d and %d are served by groups %d and %d: one move takes the slots of one group", slots[0], s, from.id, g.id))
		}
		from = g
		epoch = max(epoch, g.machine.Slot(s).Epoch+1)
	}
	if from == to {
		return nil, rpcerr.Invalid(fmt.Sprintf("slots %s are served by group %d already", slotsString(slots), to.id))
	}
	if err := server.FenceError(from.raft.Unfit); err != nil {
		return nil, err
	}
	if !from.raft.IsLeader() {
		cc, fctx, err := from.srv.LeaderConn(ctx)
		if err != nil {
			return nil, err
		}
		return pb.NewClusterClient(cc).MoveSlots(fctx, req)
	}
	res, err := from.srv.ProposeMove(ctx, &fsm.Freeze{Slots: slots, Epoch: epoch, To: to.id})
	if err == nil && res.Err != nil {
		err = res.Err
	}
	if err != nil {
		return nil, rpcerr.Status(err)
	}
	from.raft.Announce() // the other nodes' movers export from their own replicas of from
	r.node.log.Info("moving slots", "from", from.id, "to", to.id, "slots", slotsString(slots), "epoch", epoch)
	r.node.kickMover()
	return &pb.MoveSlotsResponse{FromGroup: uint32(from.id), Epoch: epoch}, nil
}

// checkMove checks MoveSlots' request: slots sorted, without repeats.
func (r *router) checkMove(req *pb.MoveSlotsRequest) ([]uint16, *group, error) {
	if len(req.GetSlots()) == 0 {
		return nil, nil, rpcerr.Invalid("MoveSlots: no slot given")
	}
	if int(req.GetToGroup()) >= len(r.groups) {
		return nil, nil, rpcerr.Invalid(fmt.Sprintf("MoveSlots: group %d does not exist: this cluster has groups 0 to %d", req.GetToGroup(), len(r.groups)-1))
	}
	slots := make([]uint16, 0, len(req.GetSlots()))
	for _, s := range req.GetSlots() {
		if s >= fsm.Slots {
			return nil, nil, rpcerr.Invalid(fmt.Sprintf("MoveSlots: slot %d: want 0 to %d", s, fsm.Slots-1))
		}
		slots = append(slots, uint16(s))
	}
	slices.Sort(slots)
	return slices.Compact(slots), r.groups[req.GetToGroup()], nil
}

// Placement says which group serves a namespace's slot (or a slot), as
// this node's replicas show it.
func (r *router) Placement(_ context.Context, req *pb.PlacementRequest) (*pb.PlacementResponse, error) {
	slot, err := server.PlacementSlot(req)
	if err != nil {
		return nil, err
	}
	g, settled := r.routes.resolve(slot)
	v := g.machine.Slot(slot)
	out := &pb.PlacementResponse{Slot: uint32(slot), Group: uint32(g.id), Epoch: v.Epoch, Groups: uint32(len(r.groups))}
	if !settled && v.Frozen {
		out.Moving, out.ToGroup = true, uint32(v.To)
	}
	out.LeaderId, out.LeaderGrpc = g.srv.LeaderGRPC()
	return out, nil
}

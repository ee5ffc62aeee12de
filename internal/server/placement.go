package server

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/rpcerr"
)

// Placement and MoveSlots of a node of one group (a node of several
// answers them in its router, internal/node): every slot is group 0's,
// and there is no other group to move one to.

func (s *Server) Placement(_ context.Context, req *pb.PlacementRequest) (*pb.PlacementResponse, error) {
	slot, err := PlacementSlot(req)
	if err != nil {
		return nil, err
	}
	out := &pb.PlacementResponse{Slot: uint32(slot), Groups: 1}
	out.LeaderId, out.LeaderGrpc = s.LeaderGRPC()
	return out, nil
}

// PlacementSlot is the slot a Placement request asks about: its
// namespace's, or its slot (checked).
func PlacementSlot(req *pb.PlacementRequest) (uint16, error) {
	if req.GetNamespace() != "" {
		return fsm.Slot(req.GetNamespace()), nil
	}
	if req.GetSlot() >= fsm.Slots {
		return 0, rpcerr.Invalid(fmt.Sprintf("Placement: slot %d: want 0 to %d", req.GetSlot(), fsm.Slots-1))
	}
	return uint16(req.GetSlot()), nil
}

func (s *Server) MoveSlots(context.Context, *pb.MoveSlotsRequest) (*pb.MoveSlotsResponse, error) {
	return nil, rpcerr.New(codes.FailedPrecondition, pb.ErrorReason_NOT_SUPPORTED, "NotSupportedError",
		"this cluster runs one Raft group: there is no other group to move slots to (serve --groups G starts a cluster of several)", nil)
}

package lockcluster

import (
	"context"
	"hash/crc32"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// Slots is how many slots the namespaces hash to: a cluster of several
// Raft groups (serve --groups) spreads the slots over its groups, and
// moves them between groups (Admin.MoveSlots).
const Slots = 4096

// Placement is where a namespace's slot lives, as the node asked sees it.
type Placement struct {
	Slot  int `json:"slot"`
	Group int `json:"group"` // the group that serves it (while it moves, the group it leaves)
	Epoch int `json:"epoch"`
	// Moving: the slot is on its way to ToGroup (its calls wait).
	Moving  bool `json:"moving"`
	ToGroup int  `json:"toGroup,omitempty"`
	// The member that leads Group, and its client API address.
	LeaderID   string `json:"leaderId,omitempty"`
	LeaderAddr string `json:"leaderAddr,omitempty"`
	Groups     int    `json:"groups"` // the cluster's Raft groups
}

// Placement says which group serves namespace ns (or, with ns empty,
// slot) on a cluster of several groups; with one group, always group 0.
func (a *Admin) Placement(ctx context.Context, ns string, slot int) (Placement, error) {
	var out Placement
	err := a.cluster(ctx, func(ctx context.Context, cc pb.ClusterClient) error {
		resp, err := cc.Placement(ctx, &pb.PlacementRequest{Namespace: ns, Slot: uint32(slot)})
		if err == nil {
			out = Placement{Slot: int(resp.Slot), Group: int(resp.Group), Epoch: int(resp.Epoch), Moving: resp.Moving, ToGroup: int(resp.ToGroup),
				LeaderID: resp.LeaderId, LeaderAddr: resp.LeaderGrpc, Groups: int(resp.Groups)}
		}
		return err
	})
	return out, err
}

// MoveResult is a move that began: the group the slots leave, and the
// move's epoch.
type MoveResult struct {
	FromGroup int `json:"fromGroup"`
	Epoch     int `json:"epoch"`
}

// MoveSlots begins moving slots (all served by one group) to group to;
// their namespaces' sessions, locks and queues move with them, and their
// calls wait meanwhile instead of failing. It returns once the source
// froze the slots; Placement says when the move is done.
func (a *Admin) MoveSlots(ctx context.Context, slots []int, to int) (MoveResult, error) {
	req := &pb.MoveSlotsRequest{ToGroup: uint32(to)}
	for _, s := range slots {
		req.Slots = append(req.Slots, uint32(s))
	}
	var out MoveResult
	err := a.cluster(ctx, func(ctx context.Context, cc pb.ClusterClient) error {
		resp, err := cc.MoveSlots(ctx, req)
		if err == nil {
			out = MoveResult{FromGroup: int(resp.FromGroup), Epoch: int(resp.Epoch)}
		}
		return err
	})
	return out, err
}

// SlotOf is the slot namespace ns hashes to (CRC-32C mod Slots), as the
// cluster computes it.
func SlotOf(ns string) int { return int(crc32.Checksum([]byte(ns), castagnoli) % Slots) }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

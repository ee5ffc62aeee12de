package server

import (
	"context"
	"fmt"

	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/raftnode"
)

// ProposeMove appends one of the entries that move slots between groups
// (fsm's SetGroup, Freeze, ImportChunk, Import, Drop, and the abort's
// Reject and Unfreeze) to this group's log when this node leads the
// group, and returns the machine's answer. It is the node's group
// manager's, for the initial spread of a cluster of several groups and
// for moves (internal/node), which a client can never reach: no RPC
// proposes these entries. It is not gated by the cluster level (level.go):
// a cluster of several groups is bootstrapped by members of this release
// only, and takes no member that runs another (internal/node refuses
// joins to it). A follower gets raftnode's NotLeaderError.
func (s *Server) ProposeMove(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	switch cmd.(type) {
	case *fsm.SetGroup, *fsm.Freeze, *fsm.ImportChunk, *fsm.Import, *fsm.Drop, *fsm.Reject, *fsm.Unfreeze:
	default:
		return fsm.Result{}, fmt.Errorf("ProposeMove: %s is not a move entry", cmd.Type())
	}
	node := s.replica()
	if node == nil {
		return fsm.Result{}, raftnode.ErrShutdown
	}
	ap, _, err := s.proposeUngated(ctx, node, cmd)
	return ap.Result, err
}

// FenceError is the error every lockcluster.v1 call but Status gets from
// a replica that unfit says is unfit (fence.go), or nil: the router of a
// node of several groups asks it of the call's group.
func FenceError(unfit func() error) error {
	if err := unfit(); err != nil {
		return toStatus(err)
	}
	return nil
}

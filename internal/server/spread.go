package server

import (
	"context"
	"fmt"

	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/raftnode"
)

// ProposeMove appends one of the entries that move slots between groups
// (fsm's SetGroup, Freeze, ImportChunk, Import, Drop, Reject, Unfreeze)
// to this group's log when this node leads the group, and returns the
// machine's answer. It is the node's group manager's (internal/node): the
// initial spread of a cluster of several groups, the mover, and the
// admin's MoveSlots, whose Freeze it proposes after its own checks; no
// other RPC proposes these entries. It is not gated by the cluster level (level.go):
// a cluster of several groups is bootstrapped by members of this release
// only, and takes no member that runs another (internal/node refuses
// joins to it). A follower gets raftnode's NotLeaderError.
func (s *Server) ProposeMove(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	if err := moveEntry(cmd); err != nil {
		return fsm.Result{}, err
	}
	node := s.replica()
	if node == nil {
		return fsm.Result{}, raftnode.ErrShutdown
	}
	ap, _, err := s.proposeUngated(ctx, node, cmd)
	return ap.Result, err
}

func moveEntry(cmd fsm.Command) error {
	switch cmd.(type) {
	case *fsm.SetGroup, *fsm.Freeze, *fsm.ImportChunk, *fsm.Import, *fsm.Drop, *fsm.Reject, *fsm.Unfreeze:
		return nil
	}
	return fmt.Errorf("ProposeMove: %s is not a move entry", cmd.Type())
}

// ProposeMoves is ProposeMove for several entries, in order, proposed
// back to back so that their commits batch (a move's import chunks and
// its Import), where the replica can (raftnode.Node.ProposeAll); it
// returns the machine's answer to each entry applied, and stops at the
// first error or refusal.
func (s *Server) ProposeMoves(ctx context.Context, cmds []fsm.Command) ([]fsm.Result, error) {
	node := s.replica()
	if node == nil {
		return nil, raftnode.ErrShutdown
	}
	all, ok := node.(interface {
		ProposeAll(context.Context, [][]byte) ([]raftnode.ProposeResult, error)
	})
	if !ok {
		var out []fsm.Result
		for _, c := range cmds {
			r, err := s.ProposeMove(ctx, c)
			if err != nil || r.Err != nil {
				return append(out, r), err
			}
			out = append(out, r)
		}
		return out, nil
	}
	datas := make([][]byte, len(cmds))
	for i, c := range cmds {
		if err := moveEntry(c); err != nil {
			return nil, err
		}
		d, err := fsm.EncodeEntry(fsm.Entry{Time: s.cfg.Now().UnixNano(), Cmd: c})
		if err != nil {
			return nil, err
		}
		datas[i] = d
	}
	rs, err := all.ProposeAll(ctx, datas)
	out := make([]fsm.Result, 0, len(rs))
	for _, r := range rs {
		ap, ok := r.Response.(fsm.Applied)
		if !ok {
			return out, fmt.Errorf("internal error: entry %d applied with response %T", r.Index, r.Response)
		}
		out = append(out, ap.Result)
		if ap.Result.Err != nil {
			return out, nil
		}
	}
	return out, err
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

package raftnode

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

// Sentinels. Raft's own errors are mapped to these once, in this package;
// callers test them with errors.Is and never see raft's errors.
var (
	// ErrNotLeader: this node is not the leader (or is handing leadership
	// over). Returned as a *NotLeaderError carrying the known leader, if any.
	// The operation was not applied; retry it on the leader.
	ErrNotLeader = errors.New("raftnode: not the leader")

	// ErrNotApplied: the entry was definitely not appended to the log, so
	// retrying a non-idempotent command is safe. Every ErrNotLeader from
	// Propose also matches ErrNotApplied, as does a Propose that failed
	// because the leader did not accept the entry before the deadline, or
	// because the node shut down before appending it.
	ErrNotApplied = errors.New("raftnode: entry not applied")

	// ErrOutcomeUnknown: the entry was appended to the leader's log but the
	// leader lost leadership, shut down, or the deadline passed before it
	// was applied. It may or may not commit; callers must find out (e.g. by
	// reading) before retrying a non-idempotent command.
	ErrOutcomeUnknown = errors.New("raftnode: outcome unknown")

	// ErrShutdown: the node is shut down (or shutting down).
	ErrShutdown = errors.New("raftnode: node is shut down")

	// ErrNotMember: Leave named a server that is not in the committed
	// configuration (never was, or was removed already).
	ErrNotMember = errors.New("raftnode: not a member")
)

// NotLeaderError is the concrete form of ErrNotLeader. LeaderID and
// LeaderAddr are this node's best knowledge of the current leader and are
// empty when it is unknown (e.g. during an election or a leadership
// transfer away from this node).
type NotLeaderError struct {
	LeaderID   string
	LeaderAddr string
}

func (e *NotLeaderError) Error() string {
	if e.LeaderID == "" {
		return "raftnode: not the leader (leader unknown)"
	}
	return fmt.Sprintf("raftnode: not the leader; leader is %s at %s", e.LeaderID, e.LeaderAddr)
}

// Is makes errors.Is(err, ErrNotLeader) and errors.Is(err, ErrNotApplied)
// true.
func (e *NotLeaderError) Is(target error) bool {
	return target == ErrNotLeader || target == ErrNotApplied
}

// notApplied marks err as "definitely not appended".
type notApplied struct{ err error }

func (e notApplied) Error() string        { return e.err.Error() }
func (e notApplied) Unwrap() error        { return e.err }
func (e notApplied) Is(target error) bool { return target == ErrNotApplied }

// notLeader builds a NotLeaderError from raft's view of the leader. A hint
// naming this node is stale (raft said we are not leader), so it is dropped.
func (n *Node) notLeader() error {
	addr, id := n.raft.LeaderWithID()
	if string(id) == n.cfg.ID {
		return &NotLeaderError{}
	}
	return &NotLeaderError{LeaderID: string(id), LeaderAddr: string(addr)}
}

// mapWriteError maps the error of a log-appending operation (Apply,
// AddVoter, RemoveServer). appended says whether raft had assigned the
// entry a log index, i.e. written it to the leader's log, before failing:
// raft answers ErrNotLeader, ErrLeadershipTransferInProgress and
// ErrEnqueueTimeout before dispatch, ErrLeadershipLost after it, and
// ErrRaftShutdown in both cases.
func (n *Node) mapWriteError(err error, appended bool) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return n.notLeader()
	case errors.Is(err, raft.ErrEnqueueTimeout):
		if n.raft.State() != raft.Leader {
			return n.notLeader()
		}
		return notApplied{fmt.Errorf("raftnode: leader did not accept the entry before the deadline: %w", context.DeadlineExceeded)}
	case errors.Is(err, raft.ErrRaftShutdown) && !appended:
		return notApplied{ErrShutdown}
	case errors.Is(err, raft.ErrLeadershipLost), appended:
		return fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
	default:
		// Not appended, and not an error raft documents for this case.
		return fmt.Errorf("raftnode: %w", err)
	}
}

// mapReadError maps the error of a read-only operation (VerifyLeader,
// Barrier, LeadershipTransfer, Snapshot): no outcome is ever unknown.
func (n *Node) mapReadError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return n.notLeader()
	case errors.Is(err, raft.ErrEnqueueTimeout):
		if n.raft.State() != raft.Leader {
			return n.notLeader()
		}
		return fmt.Errorf("raftnode: leader busy: %w", context.DeadlineExceeded)
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrShutdown
	default:
		return fmt.Errorf("raftnode: %w", err)
	}
}

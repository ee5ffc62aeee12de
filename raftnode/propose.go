package raftnode

import (
	"context"
	"fmt"

	"github.com/hashicorp/raft"
)

// ProposeResult is the outcome of a committed and applied proposal.
type ProposeResult struct {
	// Index is the entry's log index (the project's version and fencing
	// token).
	Index uint64
	// Response is whatever the FSM's Apply returned for the entry; an FSM
	// that rejects a command returns its rejection here, as a value.
	Response any
}

// Propose replicates data through the log and returns once this node's FSM
// has applied it. It must be called on the leader; raft itself says when it
// is not (checking State first would race with elections).
//
// The context's deadline (defaultTimeout if it has none) bounds both the
// wait for raft to accept the entry and the wait for it to be applied.
// Errors:
//   - *NotLeaderError (errors.Is ErrNotLeader and ErrNotApplied): not
//     applied, retry on the leader it names;
//   - ErrNotApplied: not appended (leader overloaded until the deadline, or
//     shut down first): safe to retry;
//   - ErrOutcomeUnknown: appended, then leadership was lost, the node shut
//     down, or the deadline passed: the entry may or may not commit;
//   - ctx's error if ctx was already done: nothing was proposed.
//
// Group commit: concurrent Propose calls are batched by raft itself. With
// BatchApplyCh the apply channel is buffered to maxAppendEntries, and the
// leader loop (raft.go, leaderLoop, "case newLog := <-r.applyCh") drains
// up to maxAppendEntries ready entries without blocking and hands them to
// dispatchLogs, which writes them with one StoreLogs call (one bolt
// transaction, one fsync) and wakes the replicators, which ship them in
// AppendEntries RPCs of up to maxAppendEntries entries. No batching is
// needed here.
func (n *Node) Propose(ctx context.Context, data []byte) (ProposeResult, error) {
	if err := ctx.Err(); err != nil {
		return ProposeResult{}, err
	}
	if n.isClosing() {
		return ProposeResult{}, notApplied{ErrShutdown}
	}
	ctx, cancel, timeout := withTimeout(ctx)
	defer cancel()

	f := n.raft.Apply(data, timeout)
	resolved, err := n.await(ctx, f)
	if !resolved {
		// raft accepted the entry, and we stopped waiting: it may commit.
		return ProposeResult{}, fmt.Errorf("%w: stopped waiting for the entry: %v", ErrOutcomeUnknown, err)
	}
	if err != nil {
		// Index is set when the leader appends the entry; reading it after
		// the future resolved is race-free.
		return ProposeResult{}, n.mapWriteError(err, f.Index() != 0)
	}
	return ProposeResult{Index: f.Index(), Response: f.Response()}, nil
}

// indexOf returns the log index assigned to a resolved future, or 0.
func indexOf(f raft.Future) uint64 {
	if i, ok := f.(interface{ Index() uint64 }); ok {
		return i.Index()
	}
	return 0
}

// ProposeAll proposes every entry of datas, in order, without waiting for
// one before the next (raft keeps the order: one goroutine's Apply calls
// reach its leader loop in sequence, and their commits batch), and
// returns once each is applied or the first fails. A move's import
// chunks go this way (internal/node). Errors are Propose's, for the
// first entry that failed; the entries after it may or may not commit.
func (n *Node) ProposeAll(ctx context.Context, datas [][]byte) ([]ProposeResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if n.isClosing() {
		return nil, notApplied{ErrShutdown}
	}
	ctx, cancel, timeout := withTimeout(ctx)
	defer cancel()
	fs := make([]raft.ApplyFuture, len(datas))
	for i, d := range datas {
		fs[i] = n.raft.Apply(d, timeout)
	}
	out := make([]ProposeResult, 0, len(fs))
	for _, f := range fs {
		resolved, err := n.await(ctx, f)
		if !resolved {
			return out, fmt.Errorf("%w: stopped waiting for the entry: %v", ErrOutcomeUnknown, err)
		}
		if err != nil {
			return out, n.mapWriteError(err, f.Index() != 0)
		}
		out = append(out, ProposeResult{Index: f.Index(), Response: f.Response()})
	}
	return out, nil
}

// Announce appends a raft barrier (no FSM entry) without waiting for it,
// so that the followers learn at once that what this leader committed is
// committed: they learn a commit index only with the next AppendEntries,
// which in an idle group comes CommitTimeout later. A move's Freeze and
// Import are followed by one (internal/node): the other nodes' routers
// and movers act on their own replicas. Harmless on a follower (raft
// refuses it).
func (n *Node) Announce() {
	if !n.isClosing() {
		n.raft.Barrier(defaultTimeout)
	}
}

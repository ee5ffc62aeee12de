package raftnode

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// readPollInterval paces ReadBarrier's wait for the FSM when no applied
// entry will signal progress (only no-ops or barriers are outstanding).
const readPollInterval = 2 * time.Millisecond

// ReadBarrier makes a linearizable read possible: it returns nil only if,
// after the call started, this node was confirmed leader by a quorum and
// its FSM has applied every entry committed before the call started. The
// caller then reads its FSM directly. Non-leaders get a *NotLeaderError.
//
// Algorithm (the "read index" of the Raft thesis, §6.4):
//
//  1. Term barrier. A new leader knows that every entry committed by an
//     earlier leader is in its log, but its commit index may not cover
//     them yet; it does once an entry of its own term commits. So, once per
//     term, run raft.Barrier (an entry of the current term that returns
//     after the FSM has applied everything before it) and remember the
//     term, checking that the term did not change around it. It is started
//     in the background on every election, so reads rarely wait for it.
//  2. readIndex := CommitIndex(). Everything committed before the call is
//     at or below it: commit indexes only grow within the leader's term,
//     and step 1 made it cover earlier terms.
//  3. VerifyLeader: a quorum confirms that we were still leader after the
//     call started, so no newer leader can have committed anything we
//     lack; the term must still be the one of step 1.
//  4. Wait until the FSM has applied readIndex, as tracked by trackingFSM
//     (raft.AppliedIndex only says an entry was handed to the FSM
//     goroutine). Entries the FSM never sees (no-ops, barriers) are skipped
//     by looking at the log once raft has handed everything up to
//     readIndex over; an applied barrier also advances the index itself.
func (n *Node) ReadBarrier(ctx context.Context) error {
	if n.isClosing() {
		return ErrShutdown
	}
	if n.raft.State() != raft.Leader {
		return n.notLeader()
	}
	ctx, cancel, _ := withTimeout(ctx)
	defer cancel()

	term := n.raft.CurrentTerm()
	if err := n.ensureTermBarrier(ctx, term); err != nil {
		return err
	}
	readIndex := n.raft.CommitIndex()
	resolved, err := n.await(ctx, n.raft.VerifyLeader())
	if !resolved {
		return readAbandoned(err)
	}
	if err != nil {
		return n.mapReadError(err)
	}
	if n.raft.CurrentTerm() != term {
		return n.notLeader()
	}
	return n.waitApplied(ctx, readIndex)
}

// ensureTermBarrier makes sure a barrier of the given term has been
// applied (step 1 above). Concurrent callers share one barrier.
func (n *Node) ensureTermBarrier(ctx context.Context, term uint64) error {
	if n.barrierTerm.Load() == term {
		return nil
	}
	select {
	case n.barrierSem <- struct{}{}:
	case <-ctx.Done():
		return readAbandoned(ctx.Err())
	case <-n.stopped:
		return ErrShutdown
	}
	defer func() { <-n.barrierSem }()
	if n.barrierTerm.Load() == term {
		return nil
	}
	f := n.raft.Barrier(timeLeft(ctx))
	resolved, err := n.await(ctx, f)
	if !resolved {
		return readAbandoned(err)
	}
	if err != nil {
		return n.mapReadError(err)
	}
	// The barrier was issued after term was read; if the term is still the
	// same, the barrier is an entry of that term.
	if n.raft.CurrentTerm() != term {
		return n.notLeader()
	}
	// The FSM goroutine answered the barrier after everything before it.
	n.fsm.advance(indexOf(f))
	n.barrierTerm.Store(term)
	n.logger.Debug("term barrier applied", "term", term, "index", indexOf(f))
	return nil
}

// waitApplied waits until the FSM reflects every entry up to index.
func (n *Node) waitApplied(ctx context.Context, index uint64) error {
	var tick <-chan time.Time
	for {
		changed := n.fsm.Changed()
		if n.fsmReached(index) {
			return nil
		}
		if tick == nil {
			t := time.NewTicker(readPollInterval)
			defer t.Stop()
			tick = t.C
		}
		select {
		case <-changed:
		case <-tick:
		case <-ctx.Done():
			return fmt.Errorf("raftnode: read barrier: waiting for the FSM to apply index %d: %w", index, ctx.Err())
		case <-n.stopped:
			return ErrShutdown
		}
	}
}

// fsmReached reports whether the FSM reflects every entry up to index.
func (n *Node) fsmReached(index uint64) bool {
	applied := n.fsm.Index()
	if applied >= index {
		return true
	}
	if n.raft.AppliedIndex() < index {
		return false // raft has not even handed everything over yet
	}
	// Everything up to index is with the FSM goroutine. Entries it never
	// passes to the FSM need no wait: look for one it does pass.
	for i := index; i > applied; i-- {
		var l raft.Log
		if err := n.logs.GetLog(i, &l); err != nil {
			// Compacted entries are covered by a snapshot of this FSM.
			return errors.Is(err, raft.ErrLogNotFound)
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			return false
		}
	}
	return true
}

// readAbandoned wraps the reason ReadBarrier stopped waiting (ctx's error
// or ErrShutdown).
func readAbandoned(err error) error {
	if errors.Is(err, ErrShutdown) {
		return ErrShutdown
	}
	return fmt.Errorf("raftnode: read barrier: %w", err)
}

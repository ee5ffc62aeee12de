package raftnode

import (
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// clampTransport wraps the raft transport so that every AppendEntries
// request raft handles carries a LeaderCommitIndex no higher than the last
// index the request proves this node's log shares with the leader's: the
// last entry it carries, or PrevLogEntry when it carries none.
//
// That is the Raft paper's rule ("set commitIndex = min(leaderCommit, index
// of last new entry)"). hashicorp/raft v1.7.3 (and v1.8.0) uses the node's
// own last index instead (raft.go, appendEntries, "Update the commit
// index": idx := min(a.LeaderCommitIndex, r.getLastIndex())), so a node
// whose log has an uncommitted tail from an older term applies that tail
// when a request with PrevLogEntry = k, no entries and LeaderCommitIndex > k
// reaches it. A new leader sends exactly such a request when its
// replication goroutine read its last index before its no-op was stored and
// read the commit index after the no-op was committed through another
// follower (replication.go, replicateTo -> setupAppendEntries). See
// DESIGN.md, "The follower commit rule".
//
// Clamping only ever lowers the commit index a request announces, and the
// leader announces it again on every later request, so liveness is
// unchanged: the follower learns the commit index as soon as a request
// proves its log up to it.
//
// The wrapper also applies the node's fences (fence.go): while the node
// may not campaign (diverged, damaged, disk failing) it refuses to send
// RequestVote and RequestPreVote, so it can never win an election; while
// it may not vote (damaged) it answers every vote and pre-vote request
// with a refusal itself, before raft sees it. It still follows the leader.
//
// Requests reach raft in two ways, and both are clamped: the consumer
// channel, relayed by a goroutine, and the heartbeat fast path (raft's
// heartbeats carry no commit index, but a transport may route any
// entry-less request there).
type clampTransport struct {
	raft.Transport
	out    chan raft.RPC
	done   chan struct{}
	fences votePolicy // nil: campaigns and votes freely
	off    bool       // relay without clamping (tests that show raft alone)

	closeOnce    sync.Once
	clamped      atomic.Uint64 // requests whose commit index was lowered
	votesRefused atomic.Uint64 // vote requests refused while the node may not vote

	commits commitWatch // what the leader announced, before clamping (behind.go)
}

// The optional interfaces raft looks for on its transport: without
// WithPreVote it silently disables pre-vote (api.go, NewRaft), without
// WithClose shutdown does not close the transport. Both are forwarded.
var (
	_ raft.WithPreVote = (*clampTransport)(nil)
	_ raft.WithClose   = (*clampTransport)(nil)
)

// votePolicy says whether this node may ask for votes and grant them.
type votePolicy interface {
	mayCampaign() bool
	mayVote() bool
}

// newClampTransport starts relaying inner's consumer channel. fences, if
// not nil, is consulted before every vote request this node sends and
// every one it receives.
func newClampTransport(inner raft.Transport, fences votePolicy) *clampTransport {
	t := &clampTransport{
		Transport: inner,
		out:       make(chan raft.RPC),
		done:      make(chan struct{}),
		fences:    fences,
		off:       !workarounds.clampCommit,
	}
	go t.relay(inner.Consumer())
	return t
}

// clampCommit lowers a request's LeaderCommitIndex to what it proves.
// It reports whether it changed anything.
func clampCommit(a *raft.AppendEntriesRequest) bool {
	proven := a.PrevLogEntry
	if n := len(a.Entries); n > 0 {
		proven = a.Entries[n-1].Index
	}
	if a.LeaderCommitIndex <= proven {
		return false
	}
	a.LeaderCommitIndex = proven
	return true
}

func (t *clampTransport) clamp(rpc raft.RPC) {
	a, ok := rpc.Command.(*raft.AppendEntriesRequest)
	if !ok {
		return
	}
	t.commits.announced(a.Term, a.LeaderCommitIndex)
	if !t.off && clampCommit(a) {
		t.clamped.Add(1)
	}
}

func (t *clampTransport) relay(in <-chan raft.RPC) {
	for {
		select {
		case rpc := <-in:
			if t.refuseVote(rpc) {
				continue
			}
			t.clamp(rpc)
			select {
			case t.out <- rpc:
			case <-t.done:
				return
			}
		case <-t.done:
			return
		}
	}
}

// Consumer returns the relayed, clamped requests.
func (t *clampTransport) Consumer() <-chan raft.RPC { return t.out }

// SetHeartbeatHandler installs cb behind the clamp.
func (t *clampTransport) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	if cb == nil {
		t.Transport.SetHeartbeatHandler(nil)
		return
	}
	t.Transport.SetHeartbeatHandler(func(rpc raft.RPC) {
		t.clamp(rpc)
		cb(rpc)
	})
}

// refuseVote answers a vote or pre-vote request with a refusal while this
// node may not vote, and reports whether it did. The answer carries the
// candidate's own term, so that it neither deposes nor delays anyone: the
// candidate just counts one vote fewer (raft.go, electSelf and
// preElectSelf).
func (t *clampTransport) refuseVote(rpc raft.RPC) bool {
	if t.fences == nil || t.fences.mayVote() {
		return false
	}
	switch req := rpc.Command.(type) {
	case *raft.RequestVoteRequest:
		rpc.Respond(&raft.RequestVoteResponse{RPCHeader: req.RPCHeader, Term: req.Term, Granted: false}, nil)
	case *raft.RequestPreVoteRequest:
		rpc.Respond(&raft.RequestPreVoteResponse{RPCHeader: req.RPCHeader, Term: req.Term, Granted: false}, nil)
	default:
		return false
	}
	t.votesRefused.Add(1)
	return true
}

// errFenced is returned for vote requests of a fenced node.
var errFenced = &fencedError{}

type fencedError struct{}

func (*fencedError) Error() string {
	return "raftnode: this replica is fenced (diverged, damaged or failing storage) and does not stand for election"
}

func (t *clampTransport) mayCampaign() bool { return t.fences == nil || t.fences.mayCampaign() }

func (t *clampTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if !t.mayCampaign() {
		return errFenced
	}
	return t.Transport.RequestVote(id, target, args, resp)
}

// RequestPreVote forwards to the inner transport, which must support
// pre-vote (NetworkTransport and InmemTransport do).
func (t *clampTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if !t.mayCampaign() {
		return errFenced
	}
	pv, ok := t.Transport.(raft.WithPreVote)
	if !ok {
		return errNoPreVote
	}
	return pv.RequestPreVote(id, target, args, resp)
}

var errNoPreVote = &noPreVoteError{}

type noPreVoteError struct{}

func (*noPreVoteError) Error() string {
	return "raftnode: the wrapped transport does not support pre-vote"
}

// Close stops the relay and closes the inner transport if it can be closed.
func (t *clampTransport) Close() error {
	var err error
	t.closeOnce.Do(func() {
		close(t.done)
		if c, ok := t.Transport.(raft.WithClose); ok {
			err = c.Close()
		}
	})
	return err
}

// workarounds switches this package's corrections of hashicorp/raft on.
// Only tests switch them off, to show what the library does alone.
var workarounds = struct {
	clampCommit   bool // clampTransport lowers LeaderCommitIndex
	monotonicLogs bool // the log store is a raft.MonotonicLogStore
}{true, true}

// monotonicLogs declares the log store a raft.MonotonicLogStore. After
// installing a snapshot raft then removes every old entry (raft.go,
// installSnapshot: removeOldLogs) instead of compacting only up to
// min(snapshot, last - TrailingLogs) (snapshot.go, compactLogs), which
// keeps a follower's stale entries below the snapshot; a node that later
// leads would send them to a lagging follower as history. The bolt store
// does not need gaps to be avoided; it only needs the stale entries gone.
type monotonicLogs struct{ raft.LogStore }

func (monotonicLogs) IsMonotonic() bool { return true }

var _ raft.MonotonicLogStore = monotonicLogs{}

package server

import (
	"context"

	"github.com/lockcluster/lockcluster/raftnode"
)

// Replica is everything the server needs of this node's member of the
// replicated log: proposing, linearizable reads, leadership, and
// membership. The applied state itself is the fsm.Machine in Config, which
// the replica applies every committed entry to (and hands to Apply).
//
// *raftnode.Node implements it in production. fake_test.go has an
// in-memory one that applies straight to an fsm.Machine, so the handlers,
// the forwarding decisions, the event fan-out and the heartbeat path are
// tested without raft, in milliseconds.
//
// It is the one interface named for the whole member: session liveness
// sees a narrower view of it (session.Log, which leader.go's sessionLog
// adapts), and the health gauges another (metrics.ReplicaHealth).
type Replica interface {
	// Propose appends data to the log and returns once this node has
	// applied it, with the machine's answer in the result's Response (an
	// fsm.Applied). Errors follow raftnode's: *raftnode.NotLeaderError
	// (errors.Is raftnode.ErrNotLeader) when this node does not lead,
	// raftnode.ErrNotApplied, raftnode.ErrOutcomeUnknown, ErrShutdown.
	Propose(ctx context.Context, data []byte) (raftnode.ProposeResult, error)
	// ReadBarrier returns nil once this node, confirmed leader after the
	// call started, has applied every entry committed before it; a
	// *raftnode.NotLeaderError elsewhere.
	ReadBarrier(ctx context.Context) error
	// IsLeader reports whether this node leads now (a hint: only a
	// successful Propose or ReadBarrier proves it).
	IsLeader() bool
	// Leader names the leader this node knows ("" for none).
	Leader() (id, addr string)
	// SubscribeLeadership delivers this node's leadership as a level: the
	// current one at once, then every change (raftnode's contract).
	SubscribeLeadership() (ch <-chan bool, cancel func())
	// State is the node's raft state for Status ("Leader", "Follower"...).
	State() string
	// Stats are raft's statistics; Status reads "term" and "commit_index".
	Stats() map[string]string
	AppliedIndex() uint64
	LastIndex() uint64
	// Members is the raft configuration; Join and Leave change it (on the
	// leader; *raftnode.NotLeaderError elsewhere, raftnode.ErrNotMember for
	// a Leave of an id that is not a member).
	Members() ([]raftnode.Member, error)
	Join(ctx context.Context, id, addr string) error
	Leave(ctx context.Context, id string) error
	// AddLearner adds a non-voter (a voter stays one); Promote makes a
	// non-voter a voter (nil for a voter; raftnode.ErrNotMember for an id
	// that is not a member). On the leader, as Join (learner.go).
	AddLearner(ctx context.Context, id, addr string) error
	Promote(ctx context.Context, id string) error
	// Unfit returns nil while this node may serve clients, and otherwise
	// why not (raftnode's fences: diverged, damaged, storage failing,
	// behind). Status reports it; the interceptors in fence.go refuse every
	// other call meanwhile.
	Unfit() error
}

var _ Replica = (*raftnode.Node)(nil)

// replicaCell holds the Replica once Run has it (nil before).
type replicaCell struct{ r Replica }

// replica returns the node's Replica, or nil before Run.
func (s *Server) replica() Replica {
	if c := s.node.Load(); c != nil {
		return c.r
	}
	return nil
}

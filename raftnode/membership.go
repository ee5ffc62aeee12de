package raftnode

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// Member is one server of the latest cluster configuration.
type Member struct {
	ID       string
	Addr     string
	Suffrage string // "Voter", "Nonvoter" or "Staging"
	Leader   bool
}

// Join adds server id at addr as a voter. It must run on the leader;
// elsewhere it returns a *NotLeaderError naming the leader, so the caller
// can forward the request. It is idempotent: if id is already a voter at
// addr in the committed configuration it returns nil at once, on any node.
// Joining a known id at a new address updates the address; an addr used by
// another member is refused (remove that member first).
func (n *Node) Join(ctx context.Context, id, addr string) error {
	if id == "" || addr == "" {
		return fmt.Errorf("raftnode: join: id=%q addr=%q: both are required", id, addr)
	}
	if n.isClosing() {
		return ErrShutdown
	}
	conf, committed, err := n.configuration()
	if err != nil {
		return err
	}
	for _, s := range conf.Servers {
		switch {
		case string(s.ID) == id && string(s.Address) == addr && s.Suffrage == raft.Voter && committed:
			n.logger.Debug("join: already a voter", "id", id, "addr", addr)
			return nil
		case string(s.ID) != id && string(s.Address) == addr:
			return fmt.Errorf("raftnode: join %s: address %s is used by member %s; remove it first", id, addr, s.ID)
		}
	}
	ctx, cancel, timeout := withTimeout(ctx)
	defer cancel()
	f := n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout)
	if err := n.awaitChange(ctx, f); err != nil {
		return err
	}
	n.logger.Info("server joined", "id", id, "addr", addr, "index", f.Index())
	return nil
}

// AddLearner adds server id at addr as a learner: raft's non-voter, which
// receives the log but neither votes nor counts toward a commit, so a node
// with a long log to catch up does not slow the cluster's commits; Promote
// makes it a voter. It must run on the leader (else *NotLeaderError). It
// is idempotent as Join is: id already a learner at addr in the committed
// configuration returns nil at once. A voter is never demoted: adding a
// voter as a learner changes only its address (raft's AddNonvoter keeps
// its suffrage). An addr used by another member is refused.
func (n *Node) AddLearner(ctx context.Context, id, addr string) error {
	if id == "" || addr == "" {
		return fmt.Errorf("raftnode: add learner: id=%q addr=%q: both are required", id, addr)
	}
	if n.isClosing() {
		return ErrShutdown
	}
	conf, committed, err := n.configuration()
	if err != nil {
		return err
	}
	for _, s := range conf.Servers {
		switch {
		case string(s.ID) == id && string(s.Address) == addr && committed:
			n.logger.Debug("add learner: already a member", "id", id, "addr", addr, "suffrage", s.Suffrage)
			return nil
		case string(s.ID) != id && string(s.Address) == addr:
			return fmt.Errorf("raftnode: add learner %s: address %s is used by member %s; remove it first", id, addr, s.ID)
		}
	}
	ctx, cancel, timeout := withTimeout(ctx)
	defer cancel()
	f := n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout)
	if err := n.awaitChange(ctx, f); err != nil {
		return err
	}
	n.logger.Info("learner added", "id", id, "addr", addr, "index", f.Index())
	return nil
}

// Promote makes learner id a voter at its address (raft's AddVoter of a
// non-voter). It must run on the leader (else *NotLeaderError). The change
// is made against the configuration Promote read: one that changed in
// between (a leave, another promotion) fails it rather than revive a
// removed member. A voter returns nil at once; an id that is not in the
// committed configuration matches ErrNotMember. Whether the learner has
// caught up is the caller's to judge.
func (n *Node) Promote(ctx context.Context, id string) error {
	if id == "" {
		return errors.New(`raftnode: promote: id="": required`)
	}
	if n.isClosing() {
		return ErrShutdown
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return n.mapReadError(err)
	}
	var ids []string
	for _, s := range f.Configuration().Servers {
		ids = append(ids, string(s.ID))
		if string(s.ID) != id {
			continue
		}
		if s.Suffrage == raft.Voter {
			return nil
		}
		ctx, cancel, timeout := withTimeout(ctx)
		defer cancel()
		af := n.raft.AddVoter(s.ID, s.Address, f.Index(), timeout)
		if err := n.awaitChange(ctx, af); err != nil {
			return err
		}
		n.logger.Info("learner promoted to voter", "id", id, "addr", s.Address, "index", af.Index())
		return nil
	}
	return notMember{id: id, members: ids}
}

// Leave removes server id from the cluster (raft RemoveServer); it works
// for dead members too. It must run on the leader (else *NotLeaderError).
// Removing an id that is not in the committed configuration is an error
// matching ErrNotMember that names the members, as etcd's member remove of
// an unknown id is: a typo must not look like success.
// A leader that removes itself steps down once the change commits.
func (n *Node) Leave(ctx context.Context, id string) error {
	if id == "" {
		return errors.New(`raftnode: leave: id="": required`)
	}
	if n.isClosing() {
		return ErrShutdown
	}
	conf, committed, err := n.configuration()
	if err != nil {
		return err
	}
	present := false
	var ids []string
	for _, s := range conf.Servers {
		present = present || string(s.ID) == id
		ids = append(ids, string(s.ID))
	}
	if !present && committed {
		return notMember{id: id, members: ids}
	}
	ctx, cancel, timeout := withTimeout(ctx)
	defer cancel()
	f := n.raft.RemoveServer(raft.ServerID(id), 0, timeout)
	if err := n.awaitChange(ctx, f); err != nil {
		return err
	}
	n.logger.Info("server removed", "id", id, "index", f.Index())
	return nil
}

// awaitChange waits for a configuration change and maps its error.
func (n *Node) awaitChange(ctx context.Context, f raft.IndexFuture) error {
	resolved, err := n.await(ctx, f)
	if !resolved {
		return fmt.Errorf("%w: stopped waiting for the configuration change: %v", ErrOutcomeUnknown, err)
	}
	return n.mapWriteError(err, err != nil && f.Index() != 0)
}

// configuration returns the latest configuration and whether it is
// committed (its index is at or below this node's commit index).
func (n *Node) configuration() (raft.Configuration, bool, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return raft.Configuration{}, false, n.mapReadError(err)
	}
	return f.Configuration(), f.Index() <= n.raft.CommitIndex(), nil
}

// Members lists the servers of the latest configuration, in its order.
func (n *Node) Members() ([]Member, error) {
	conf, _, err := n.configuration()
	if err != nil {
		return nil, err
	}
	_, leaderID := n.raft.LeaderWithID()
	out := make([]Member, 0, len(conf.Servers))
	for _, s := range conf.Servers {
		out = append(out, Member{
			ID:       string(s.ID),
			Addr:     string(s.Address),
			Suffrage: s.Suffrage.String(),
			Leader:   leaderID != "" && s.ID == leaderID,
		})
	}
	return out, nil
}

// Leader returns the current leader as known to this node; both are empty
// when no leader is known.
func (n *Node) Leader() (id, addr string) {
	a, i := n.raft.LeaderWithID()
	return string(i), string(a)
}

// IsLeader reports whether this node currently believes it is the leader.
// Use it for display and routing hints only: it can be stale at once;
// Propose and ReadBarrier decide for themselves.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// State is raft's state: "Follower", "Candidate", "Leader" or "Shutdown".
func (n *Node) State() string { return n.raft.State().String() }

// AppliedIndex is the highest log index such that the FSM reflects every
// entry up to it. No-op entries (one per election) do not advance it.
func (n *Node) AppliedIndex() uint64 { return n.fsm.Index() }

// LastIndex is the index of the last entry in the local log or snapshot.
func (n *Node) LastIndex() uint64 { return n.raft.LastIndex() }

// Stats returns raft's statistics plus "fsm_applied_index" (AppliedIndex),
// "id" and "addr". For display and debugging only.
func (n *Node) Stats() map[string]string {
	s := n.raft.Stats()
	s["fsm_applied_index"] = strconv.FormatUint(n.fsm.Index(), 10)
	s["id"] = n.cfg.ID
	s["addr"] = n.Addr()
	return s
}

// transferLeadership asks the leader (this node) to hand leadership to the
// most up-to-date voter and waits until it has. Non-leaders get a
// *NotLeaderError.
func (n *Node) transferLeadership(ctx context.Context) error {
	ctx, cancel, _ := withTimeout(ctx)
	defer cancel()
	resolved, err := n.await(ctx, n.raft.LeadershipTransfer())
	if !resolved {
		return fmt.Errorf("raftnode: leadership transfer: %w", err)
	}
	if err != nil {
		return n.mapReadError(err)
	}
	n.logger.Info("leadership transferred")
	return nil
}

// fsmSnapshotFailed starts raft's error for an FSM whose Snapshot failed
// (raft v1.7.3, snapshot.go, takeSnapshot).
const fsmSnapshotFailed = "failed to start snapshot"

// Snapshot takes a snapshot now (for tests and backups) and returns the
// index it covers. It fails, wrapping raft.ErrNothingNewToSnapshot, when
// nothing was applied since the last one.
//
// An FSM whose Snapshot fails (lockcluster's does while another snapshot
// of its state is being encoded, rather than stop the applies to wait) is
// asked again every 20 ms until ctx ends: raft reports such a failure as
// "failed to start snapshot: ...", flattened to a string.
func (n *Node) Snapshot(ctx context.Context) (uint64, error) {
	ctx, cancel, _ := withTimeout(ctx)
	defer cancel()
	var f raft.SnapshotFuture
	for {
		f = n.raft.Snapshot()
		resolved, err := n.await(ctx, f)
		if !resolved {
			return 0, fmt.Errorf("raftnode: snapshot: %w", err)
		}
		if err != nil && strings.HasPrefix(err.Error(), fsmSnapshotFailed) {
			if !sleepCtx(ctx, 20*time.Millisecond) {
				return 0, fmt.Errorf("raftnode: snapshot: %w", err)
			}
			continue
		}
		if err != nil {
			return 0, n.mapReadError(err)
		}
		break
	}
	meta, rc, err := f.Open()
	if err != nil {
		return 0, fmt.Errorf("raftnode: snapshot: %w", err)
	}
	if err := rc.Close(); err != nil {
		return 0, fmt.Errorf("raftnode: snapshot: %w", err)
	}
	return meta.Index, nil
}

// notMember is ErrNotMember for one id, naming the members.
type notMember struct {
	id      string
	members []string
}

func (e notMember) Error() string {
	return fmt.Sprintf("%q is not in the cluster (members: %s)", e.id, strings.Join(e.members, ", "))
}

func (e notMember) Is(target error) bool { return target == ErrNotMember }

package raftnode

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// The behind fence: a replica whose state machine does not apply what the
// leader commits serves stale state, and its clients' session streams
// stall (their events come from this node's applied log), so their grants
// are never delivered and every other client waits for them too. Such a
// node says it is unfit (fence.go: fenceBehind), its clients move to
// another node, and it goes on following, voting and campaigning.
//
// What it measures: every AppendEntries request carries the commit index
// the leader has reached; the clamp (clamp.go) records the highest one
// announced in the leader's term before it lowers it. Every behindTick the
// node notes that value with the time, and drops the notes its FSM has
// applied (fsmReached: no-ops and barriers, which the FSM never sees, do
// not count as missing). The lag is the age of the oldest note left: how
// long ago the leader announced a commit index this node has still not
// applied. On the leader the commit index is its own.
//
// The bound. A healthy follower applies an entry within milliseconds of
// learning that it is committed: it stored the entry before acknowledging
// it, and the announcement comes with the next request (at once under
// load, or within CommitTimeout, 50 ms, when idle). Heavy load on a
// loaded two-core machine, fsyncs of tens of milliseconds and GC pauses
// stretch that to a few hundred milliseconds. behindBound, 5 s, is more
// than ten times that, and ten times raft's heartbeat timeout: a follower
// that has not applied what was committed 5 s ago is not slow, it is
// stuck (a full disk, a blocked FSM, a snapshot that takes that long to
// install). A node that restarts replays its log from its last snapshot
// (at most SnapshotThreshold + TrailingLogs entries, well under a second)
// before or while the leader's first requests arrive, and the lag counts
// only from the first announcement it sees, so a restart does not trip it.
// Once up, the fence comes down only when the lag is under behindClear
// (1 s): a node that is catching up does not flap at the bound.
const (
	behindBound   = 5 * time.Second
	behindClear   = time.Second
	behindTick    = 100 * time.Millisecond
	behindSamples = 1024 // notes kept at most (behindBound is 50 ticks)
)

// commitWatch is what the leader announced, and how far this node's FSM
// is behind it.
type commitWatch struct {
	mu    sync.Mutex
	term  uint64 // the term of the leader that announced index
	index uint64 // the highest commit index announced in term

	lag atomic.Int64 // nanoseconds, as watchBehind last measured it
}

// announced records a request's LeaderCommitIndex: a leader of a newer
// term replaces the record, one of the same term raises it, an older one
// (a deposed leader, still sending) is ignored.
func (c *commitWatch) announced(term, index uint64) {
	c.mu.Lock()
	switch {
	case term > c.term:
		c.term, c.index = term, index
	case term == c.term && index > c.index:
		c.index = index
	}
	c.mu.Unlock()
}

// leaderCommit returns the highest commit index the leader of the latest
// term this node heard from announced.
func (c *commitWatch) leaderCommit() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.index
}

// ApplyLag is how long ago the leader announced a commit index this node
// has still not applied (0 when it has applied everything announced up to
// a tick ago); measured every 100 ms. The node is fenced as behind when it
// reaches 5 s (behindBound).
func (n *Node) ApplyLag() time.Duration { return time.Duration(n.clamp.commits.lag.Load()) }

// LeaderCommitIndex is the highest commit index announced to this node by
// the leader of the latest term it heard from (this node's own commit
// index if it leads).
func (n *Node) LeaderCommitIndex() uint64 {
	return max(n.clamp.commits.leaderCommit(), n.raft.CommitIndex())
}

// behindError is why a node is fenced as behind.
type behindError struct {
	Applied   uint64        // this node's FSM
	Announced uint64        // the oldest announced commit index it has not applied
	Ago       time.Duration // how long ago that was announced
	Now       uint64        // the commit index the leader announces now
}

func (e *behindError) Error() string {
	return fmt.Sprintf("this replica has applied the log up to index %d, short of commit index %d that the leader announced %s ago (it announces %d now): it serves no clients until it catches up",
		e.Applied, e.Announced, e.Ago.Round(100*time.Millisecond), e.Now)
}

// Is makes every *behindError match ErrBehind.
func (e *behindError) Is(target error) bool { return target == ErrBehind }

// lagNote is a commit index and when this node first saw it announced.
type lagNote struct {
	at    time.Time
	index uint64
}

// lagTracker holds the announced commit indexes this node has not
// applied, oldest first, each higher than the one before.
type lagTracker struct {
	notes []lagNote
	last  uint64 // the highest index noted
}

// observe notes index, announced by now, if it is higher than any before.
// When the notes are full the last one takes the new index and keeps its
// older time: the lag may be overstated then, never understated.
func (l *lagTracker) observe(now time.Time, index uint64) {
	if index <= l.last {
		return
	}
	l.last = index
	if len(l.notes) == behindSamples {
		l.notes[len(l.notes)-1].index = index
		return
	}
	l.notes = append(l.notes, lagNote{now, index})
}

// applied drops the notes whose index this node has applied.
func (l *lagTracker) applied(reached func(uint64) bool) {
	n := len(l.notes)
	if n == 0 {
		return
	}
	if reached(l.notes[n-1].index) {
		l.notes = l.notes[:0]
		return
	}
	i := 0
	for i < n-1 && reached(l.notes[i].index) {
		i++
	}
	l.notes = append(l.notes[:0], l.notes[i:]...)
}

// lag is the age of the oldest unapplied note.
func (l *lagTracker) lag(now time.Time) time.Duration {
	if len(l.notes) == 0 {
		return 0
	}
	return now.Sub(l.notes[0].at)
}

// watchBehind measures the lag every behindTick and raises or lowers
// fenceBehind, until raft stops.
func (n *Node) watchBehind() {
	defer n.wg.Done()
	t := time.NewTicker(behindTick)
	defer t.Stop()
	var lt lagTracker
	for {
		var now time.Time
		select {
		case <-n.stopped:
			return
		case now = <-t.C:
		}
		commit := n.LeaderCommitIndex()
		lt.observe(now, commit)
		lt.applied(n.fsmReached)
		lag := lt.lag(now)
		n.clamp.commits.lag.Store(int64(lag))
		switch {
		case lag >= behindBound:
			err := &behindError{Applied: n.fsm.Index(), Announced: lt.notes[0].index, Ago: lag, Now: commit}
			if n.fences.set(fenceBehind, err) {
				n.logger.Warn("REPLICA BEHIND: this node does not apply what the leader commits; it serves no clients until it catches up",
					"applied", err.Applied, "announced", err.Announced, "announced_ago", lag.Round(time.Millisecond), "leader_commit", commit)
			}
		case lag < behindClear:
			if n.fences.clear(fenceBehind) {
				n.logger.Info("replica caught up with the leader: serving clients again", "applied", n.fsm.Index(), "leader_commit", commit)
			}
		}
	}
}

package server

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/logsafe"
	"github.com/lockcluster/lockcluster/raftnode"
)

// Learners (issue 25). A node joined with JoinRequest.learner is raft's
// non-voter: it receives the log but neither votes nor counts toward a
// commit, so a node with a long log to catch up (a snapshot to install,
// thousands of entries to replay) does not slow the cluster's commits, as
// a voter that has to be caught up before a quorum that needs it can
// commit would (etcd's learners, Consul autopilot's non-voters).
//
// The promotion rule. The leader's probes (probe.go) see each member's
// applied index; a learner is caught up when its last answer was at most
// promoteWithin entries behind the leader's commit index at that time,
// and it answered fit (not fenced: not diverged, damaged or behind). After
// promoteRounds probe rounds in a row in which it was caught up (about
// 3 s at the default interval of a second: a stabilization time, as
// Consul's), the leader promotes it to voter, unless it was joined with
// no_promote; then only Promote does, by hand. Promote by hand applies the
// same bound to the learner's last answer (one answer is enough), and
// refuses, naming how far behind it is, unless forced. A node that is not
// probed (no API address recorded) is never promoted automatically.
//
// The no-promote marks live in the leader's memory; its probes carry them
// to every member (StatusRequest.no_promote), which keeps the last set it
// heard from the leader, so that a new leader does not promote a learner
// that the old one would not. They are lost only if every node restarts:
// a learner is then promoted like any other once caught up.
//
// Promotions run under membership's mutex, one at a time with joins and
// leaves, and raftnode's Promote changes the configuration it read only
// (a leave in between fails it).

// promoteWithin is how many entries behind the leader's commit index a
// learner may be and count as caught up; promoteRounds is how many probe
// rounds in a row it must be so before the leader promotes it.
const (
	promoteWithin = 1000
	promoteRounds = 3
	// promoteTimeout bounds one automatic promotion.
	promoteTimeout = 10 * time.Second
)

// learners is what membership keeps of the learners.
type learners struct {
	mu sync.Mutex
	// noPromote: the learners promoted only by hand. On the leader, its
	// own (join and promote change it); elsewhere the set the leader's
	// last probe carried.
	noPromote map[string]bool
	// rounds: on the leader, the probe rounds in a row each learner was
	// caught up, in term (cleared when the term changes).
	rounds map[string]int
	term   string
}

// manual reports whether learner id is promoted only by hand.
func (l *learners) manual(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.noPromote[id]
}

// setManual marks learner id as promoted only by hand (or not).
func (l *learners) setManual(id string, manual bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if manual {
		if l.noPromote == nil {
			l.noPromote = map[string]bool{}
		}
		l.noPromote[id] = true
		return
	}
	delete(l.noPromote, id)
}

// forget drops what is kept of member id (promoted or removed).
func (l *learners) forget(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.noPromote, id)
	delete(l.rounds, id)
}

// manualList is the no-promote set, sorted, for the probes to carry.
func (l *learners) manualList() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.noPromote))
	for id := range l.noPromote {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// heard replaces the no-promote set with the one a leader's probe carried.
func (l *learners) heard(ids []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.noPromote)
	for _, id := range ids {
		if l.noPromote == nil {
			l.noPromote = map[string]bool{}
		}
		l.noPromote[id] = true
	}
}

// heardNoPromote keeps the no-promote set of a leader's probe (a Status
// call from a member, to a node that does not lead).
func (s *Server) heardNoPromote(ctx context.Context, req *pb.StatusRequest) {
	r := s.replica()
	if r == nil || r.IsLeader() || !isForwarded(ctx) || !s.fromMember(ctx) {
		return
	}
	s.members.learners.heard(req.GetNoPromote())
}

// isLearner reports whether suffrage is a learner's (raft's Nonvoter, or
// Staging, which raft v1.7.3 never assigns).
func isLearner(suffrage string) bool { return suffrage != "Voter" }

// describeLearner fills in member m's promotion (any node: the no-promote
// mark is the one this node knows).
func (ms *membership) describeLearner(m *pb.Member) {
	if !isLearner(m.Suffrage) {
		return
	}
	m.NoPromote = ms.learners.manual(m.Id)
	m.PromoteWithin = promoteWithin
}

// notCaughtUp says why learner id is not caught up as the leader's probes
// saw it ("" when it is), and how far behind it is (at least).
func (ms *membership) notCaughtUp(id string) (string, uint64) {
	s := ms.s
	s.probes.mu.Lock()
	seen, ok := s.probes.seen[id]
	s.probes.mu.Unlock()
	if !ok || seen.contact.IsZero() {
		if ms.grpcAddr(id) == "" {
			return fmt.Sprintf("the leader cannot tell how far behind %s is: it has no API address recorded to probe (has the node started?)", id), 0
		}
		return fmt.Sprintf("the leader cannot tell how far behind %s is: it has not answered this leader's probes yet", id), 0
	}
	if !seen.reachable {
		commit := s.commitIndex()
		behind := commit - min(seen.applied, commit)
		return fmt.Sprintf("%s has not answered the leader for %s; it is at least %d entries behind (applied index %d at its last answer; the leader has committed %d)",
			id, s.cfg.Now().Sub(seen.contact).Round(time.Second), behind, seen.applied, commit), behind
	}
	behind := seen.commit - min(seen.applied, seen.commit)
	if behind > promoteWithin {
		return fmt.Sprintf("%s is %d entries behind the leader (applied index %d; the leader had committed %d), more than the %d a learner may be to be promoted",
			id, behind, seen.applied, seen.commit, promoteWithin), behind
	}
	if seen.unfit != "" {
		return fmt.Sprintf("%s serves no clients: %s", id, seen.unfit), behind
	}
	return "", behind
}

// promote makes learner id a voter, on the leader: by hand (Promote), or
// automatically (auto: the probe loop, which holds ms.mu).
func (ms *membership) promote(ctx context.Context, req *pb.PromoteRequest) (*pb.PromoteResponse, error) {
	r, err := ms.replica()
	if err != nil {
		return nil, err
	}
	if !r.IsLeader() {
		return nil, ms.s.notLeader()
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return ms.promoteLocked(ctx, r, req.Id, req.Force, false)
}

func (ms *membership) promoteLocked(ctx context.Context, r Replica, id string, force, auto bool) (*pb.PromoteResponse, error) {
	conf, err := r.Members()
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(conf, func(m raftnode.Member) bool { return m.ID == id })
	if i < 0 {
		ids := make([]string, len(conf))
		for j, m := range conf {
			ids[j] = m.ID
		}
		return nil, fmt.Errorf("%w: %q is not in the cluster (members: %v)", raftnode.ErrNotMember, id, ids)
	}
	if !isLearner(conf[i].Suffrage) {
		ms.learners.forget(id)
		return &pb.PromoteResponse{Voters: voters(conf), AlreadyVoter: true}, nil
	}
	if !force {
		if why, behind := ms.notCaughtUp(id); why != "" {
			return nil, withInfo(codes.FailedPrecondition, pb.ErrorReason_ERROR_REASON_UNSPECIFIED, "InvalidStateError",
				"refusing to promote "+why+": wait for it to catch up ('lockcluster members' shows how far behind it is), or promote it anyway with --force",
				map[string]string{"behind": fmt.Sprint(behind), "promote_within": fmt.Sprint(promoteWithin)})
		}
	}
	if err := r.Promote(ctx, id); err != nil {
		return nil, err
	}
	ms.learners.forget(id)
	resp := &pb.PromoteResponse{}
	if conf, err := r.Members(); err == nil {
		resp.Voters = voters(conf)
	}
	resp.Warning = evenVoters(resp.Voters)
	how := "by hand"
	if auto {
		how = "automatically, caught up"
	} else if force {
		how = "by hand, forced"
	}
	ms.s.log.Info("learner promoted to voter", "id", logsafe.String(id), "how", how, "voters", resp.Voters)
	if resp.Warning != "" {
		ms.s.log.Warn(resp.Warning)
	}
	return resp, nil
}

// voters counts the voters of configuration conf (learners do not vote).
func voters(conf []raftnode.Member) uint32 {
	var n uint32
	for _, m := range conf {
		if !isLearner(m.Suffrage) {
			n++
		}
	}
	return n
}

// promoteCaughtUp runs after each probe round on the leader: it counts the
// rounds each learner has been caught up, and promotes those that have
// been for promoteRounds and are not marked no-promote. The marks and
// counts of members that are no longer learners are dropped.
func (ms *membership) promoteCaughtUp(ctx context.Context) {
	r := ms.s.replica()
	if r == nil || !r.IsLeader() {
		return
	}
	// A join, leave or reconcile under way (it may wait seconds for a
	// commit): skip this round rather than hold up the probes.
	if !ms.mu.TryLock() {
		return
	}
	defer ms.mu.Unlock()
	conf, err := r.Members()
	if err != nil {
		return
	}
	term := r.Stats()["term"]
	l := &ms.learners
	var due []string
	l.mu.Lock()
	if l.term != term || l.rounds == nil {
		l.term, l.rounds = term, map[string]int{}
	}
	learnerIDs := map[string]bool{}
	for _, m := range conf {
		if !isLearner(m.Suffrage) {
			continue
		}
		learnerIDs[m.ID] = true
		ms.s.probes.mu.Lock()
		seen, ok := ms.s.probes.seen[m.ID]
		ms.s.probes.mu.Unlock()
		// Every member with an API address was probed in the round that
		// just ended: reachable is this round's answer.
		if ok && seen.reachable && seen.unfit == "" && seen.commit-min(seen.applied, seen.commit) <= promoteWithin {
			l.rounds[m.ID]++
		} else {
			l.rounds[m.ID] = 0
		}
		if l.rounds[m.ID] >= promoteRounds && !l.noPromote[m.ID] {
			due = append(due, m.ID)
		}
	}
	for id := range l.rounds {
		if !learnerIDs[id] {
			delete(l.rounds, id)
		}
	}
	for id := range l.noPromote {
		if !learnerIDs[id] {
			delete(l.noPromote, id)
		}
	}
	l.mu.Unlock()
	for _, id := range due {
		pctx, cancel := context.WithTimeout(ctx, promoteTimeout)
		_, err := ms.promoteLocked(pctx, r, id, false, true)
		cancel()
		if err != nil && ctx.Err() == nil {
			ms.s.log.Warn("promoting a caught-up learner failed; trying again after the next probes", "id", logsafe.String(id), "error", err)
		}
	}
}

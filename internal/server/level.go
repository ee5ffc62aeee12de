package server

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/rpcerr"
)

// The version gate of rolling upgrades (issue 25). Every build supports a
// protocol level (fsm/level.go: the table of which entry types and
// snapshot formats each level introduced), and reports it in Status. The
// leader learns each member's from its probes (probe.go), and the cluster
// level is the lowest among the members of the raft configuration: this
// node at its own, a member at the level it last reported (one that
// reports none runs a release before levels: fsm.PreviousLevel), and a
// member not heard from in this term's first probe round, or since, at
// the cluster's floor (levelFloor):
// the level its state already uses, or that created it, and
// fsm.PreviousLevel when neither says more, which is conservative: a
// cluster holds no member older than the release before.
//
// gateLevel is asked before every proposal (propose): a command newer
// than the cluster level is never proposed, so a node of the release
// before never meets an entry it cannot apply. The leader's own entries
// wait for the level (the cluster secret: member.go); a client call that
// needed one would be refused FailedPrecondition, naming the feature, the
// level and the lowest member. Snapshots need no gate of their own: fsm
// writes the oldest format that carries the state (fsm.snapFormat), and
// only a state that holds something of a newer level, which the gate
// admitted, needs a newer format. A member below the level the state
// already uses is a downgrade, which is not supported: the leader warns.

// levels is what the leader keeps of the cluster level.
type levels struct {
	mu      sync.Mutex
	changed chan struct{} // closed after a probe round, then replaced (wait)
	warned  map[string]bool
	kick    chan struct{} // a probe round at once, not at the next tick
	own     atomic.Int32  // Config.ProtocolLevel (0: fsm.ProtocolLevel); tests change it
	// rounds counts the probe rounds of this term: a member not heard
	// from counts at the floor only after the first (clusterLevel).
	rounds atomic.Int64
}

func (l *levels) init(own int) {
	l.kick = make(chan struct{}, 1)
	l.own.Store(int32(own))
}

// wait returns a channel closed after the next probe round.
func (l *levels) wait() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.changed
}

// probed wakes whoever waits for the level.
func (l *levels) probed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// probeNow asks for a probe round at once (this node began to lead, or a
// member recorded its address).
func (s *Server) probeNow() {
	select {
	case s.levels.kick <- struct{}{}:
	default:
	}
}

// ownLevel is the protocol level this node supports.
func (s *Server) ownLevel() int {
	if l := s.levels.own.Load(); l > 0 {
		return int(l)
	}
	return fsm.ProtocolLevel
}

// reportedLevel is the level a member's Status answer says: one that
// says none comes from a release before levels.
func reportedLevel(st *pb.StatusResponse) int {
	if st.ProtocolLevel == 0 {
		return fsm.PreviousLevel
	}
	return int(st.ProtocolLevel)
}

// clusterLevelView is the cluster level as the leader knows it.
type clusterLevelView struct {
	level  int
	lowest string // a member at that level (this node's id when none is below it)
	why    string // why that member counts at that level: "runs level 1"
	known  bool   // this node leads and read the configuration
	leads  bool
}

// clusterLevel is the lowest level among the members of the raft
// configuration, as this node, leading, knows them; on a follower it is
// not known.
func (s *Server) clusterLevel() clusterLevelView {
	v := clusterLevelView{level: fsm.PreviousLevel}
	r := s.replica()
	if r == nil || !r.IsLeader() {
		return v
	}
	v.leads = true
	conf, err := r.Members()
	if err != nil {
		v.lowest, v.why = s.cfg.Self.ID, "cannot read the raft configuration: "+err.Error()
		return v
	}
	v = clusterLevelView{level: s.ownLevel(), lowest: s.cfg.Self.ID, why: "is this node, the leader, at level " + strconv.Itoa(s.ownLevel()), known: true, leads: true}
	floor, floorWhy := s.levelFloor(s.levels.rounds.Load() > 0)
	s.probes.mu.Lock()
	defer s.probes.mu.Unlock()
	for _, m := range conf {
		if m.ID == s.cfg.Self.ID {
			continue
		}
		level, why := floor, "has not answered this leader's probes yet"+floorWhy
		if seen := s.probes.seen[m.ID]; seen.level > 0 {
			level, why = seen.level, "runs level "+strconv.Itoa(seen.level)
			if seen.version != "" {
				why += " (version " + seen.version + ")"
			}
		}
		if level < v.level {
			v.level, v.lowest, v.why = level, m.ID, why
		}
	}
	return v
}

// levelFloor is the level no member of this cluster runs below, and why
// (", counted at level 2: ..."; "" at fsm.PreviousLevel). A member below
// it would be a downgrade, which is not supported: the floor is the level
// the state already uses (fsm.Machine.UsedLevel), or the level of the
// release that bootstrapped the cluster when this node did
// (Config.BootstrapLevel): a cluster created by a release holds no member
// older than that release, unless an operator added one, which the
// leader warns of (levelProbed), and which is heard at its own level if
// it answers the first probe round: the bootstrap level counts only once
// this term's first round is over (probedOnce). The level the state uses
// counts at once: a member below it could not have applied the entries
// that made the state, so none exists; a new leader of a cluster that
// writes records does not refuse them while a member is down (before, it
// did until its first probe round ended: docs/chaos.md, finding 8).
// Without the bootstrap level, a new cluster with a member that never
// started would wait for it forever before drawing the cluster secret,
// and Touch would stay open to anyone (member.go). Never above this
// node's own level.
func (s *Server) levelFloor(probedOnce bool) (int, string) {
	floor, why := fsm.PreviousLevel, ""
	if used := s.m.UsedLevel(); used > floor {
		floor, why = used, ", counted at level "+strconv.Itoa(used)+": the cluster's state already uses it"
	}
	if !probedOnce {
		if floor == fsm.PreviousLevel {
			why = " (the first round is under way)"
		}
	} else if b := s.cfg.BootstrapLevel; b > floor {
		floor, why = b, ", counted at level "+strconv.Itoa(b)+": the release that bootstrapped this cluster runs it"
	}
	if own := s.ownLevel(); floor > own {
		floor, why = own, ", counted at level "+strconv.Itoa(own)+", this node's"
	}
	return floor, why
}

// gateLevel refuses a command that the cluster's level does not admit:
// every member must run the level it needs (fsm.CommandLevel: its entry
// type's, or more when it uses a field a later level added, as a Request
// with MaxHolders). Commands of the release before pass at once. A node
// that does not lead lets every command pass: raft refuses its proposal
// (not the leader), and the call forwarded to the leader meets the
// leader's gate.
func (s *Server) gateLevel(cmd fsm.Command) error {
	need, own := fsm.CommandLevel(cmd), s.ownLevel()
	if need <= fsm.PreviousLevel && need <= own {
		return nil
	}
	if need > own {
		return &levelError{entry: cmd.Type(), feature: fsm.CommandFeature(cmd), need: need, level: own, lowest: s.cfg.Self.ID, why: "is this node, at level " + strconv.Itoa(own)}
	}
	v := s.clusterLevel()
	if !v.leads || v.known && v.level >= need {
		return nil
	}
	return &levelError{entry: cmd.Type(), feature: fsm.CommandFeature(cmd), need: need, level: v.level, lowest: v.lowest, why: v.why}
}

// levelError is gateLevel's refusal: FailedPrecondition, CLUSTER_LEVEL.
type levelError struct {
	entry       fsm.EntryType
	feature     string
	need, level int
	lowest, why string
}

func (e *levelError) Error() string {
	return fmt.Sprintf("%s (%s entries) needs protocol level %d, and the cluster runs at level %d: member %s %s; upgrade every member to a release of level %d or later first",
		e.feature, e.entry, e.need, e.level, e.lowest, e.why, e.need)
}

func (e *levelError) GRPCStatus() *status.Status {
	st, _ := status.FromError(rpcerr.New(codes.FailedPrecondition, pb.ErrorReason_CLUSTER_LEVEL, "NotSupportedError", e.Error(), map[string]string{
		"feature": e.feature, "needed_level": strconv.Itoa(e.need),
		"cluster_level": strconv.Itoa(e.level), "lowest_member": e.lowest,
	}))
	return st
}

// levelProbed runs after every probe round on the leader: it wakes the
// leader's work that waits for the level, and warns (once a term per
// member) of a member below the level the state already uses.
func (s *Server) levelProbed() {
	s.levels.rounds.Add(1)
	s.levels.probed()
	used := s.m.UsedLevel()
	if used <= fsm.PreviousLevel {
		return
	}
	r := s.replica()
	if r == nil {
		return
	}
	conf, err := r.Members()
	if err != nil {
		return
	}
	s.probes.mu.Lock()
	defer s.probes.mu.Unlock()
	for _, m := range conf {
		seen := s.probes.seen[m.ID]
		if m.ID == s.cfg.Self.ID || seen.level == 0 || seen.level >= used {
			continue
		}
		s.levels.mu.Lock()
		warned := s.levels.warned[m.ID]
		if s.levels.warned == nil {
			s.levels.warned = map[string]bool{}
		}
		s.levels.warned[m.ID] = true
		s.levels.mu.Unlock()
		if !warned {
			s.log.Warn("a member runs a protocol level below the one this cluster's state already uses: a downgrade, which is not supported (it cannot read this cluster's snapshots); upgrade it",
				"member", m.ID, "member_level", seen.level, "member_version", seen.version, "used_level", used)
		}
	}
}

// forget clears the per-term warnings (a new term probes anew).
func (l *levels) forget() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.warned)
	l.rounds.Store(0)
}

package placement

import (
	"math"
	"slices"

	"github.com/lockcluster/lockcluster/fsm"
)

// Limits of the member lists, so that one entry cannot grow the directory
// without bound.
const (
	// MaxMembers bounds a group's voters and non-voters together.
	MaxMembers = 64
	// MaxNodeIDBytes bounds one node id.
	MaxNodeIDBytes = 256
	// reservedGroup is never created: nextGroup may reach it, meaning
	// no group id is left, and still fit a uint16.
	reservedGroup = math.MaxUint16
)

// route is one slot of the routing table.
type route struct {
	group uint16
	epoch uint32
}

// group is one group ≥ 1 of the directory (group 0 is implicit: serving,
// no recorded members).
type group struct {
	voters, nonvoters []string
	state             GroupState
}

// move is one move of a slot set. Every slot of the set points to the
// same *move, so the set is stored once and every entry of the move
// names exactly it.
type move struct {
	slots    []uint16
	from, to uint16
	epoch    uint32
	phase    Phase
	freezeL  uint64
}

func (mv *move) export() Move {
	return Move{Slots: slices.Clone(mv.slots), From: mv.from, To: mv.to, Epoch: mv.epoch, Phase: mv.phase, FreezeL: mv.freezeL}
}

// state is the directory (groups.md §9). Its zero routes (every slot to
// group 0 at epoch 0) and newState's fields are the default state, which
// encodes to nothing.
type state struct {
	slots     [fsm.Slots]route
	groups    map[uint16]*group // groups ≥ 1
	nextGroup uint16
	moves     [fsm.Slots]*move // the record of each slot's last move, nil: none
}

func newState() *state {
	return &state{groups: map[uint16]*group{}, nextGroup: 1}
}

// empty reports whether st is the default state: every slot to group 0
// at epoch 0, no group beyond 0, no move record.
func (st *state) empty() bool {
	if st.nextGroup != 1 || len(st.groups) != 0 {
		return false
	}
	for i := range st.slots {
		if st.slots[i] != (route{}) || st.moves[i] != nil {
			return false
		}
	}
	return true
}

// exists reports whether group g exists (0 always does).
func (st *state) exists(g uint16) bool {
	if g == 0 {
		return true
	}
	_, ok := st.groups[g]
	return ok
}

// groupState is g's state (group 0: serving); 0 when g does not exist.
func (st *state) groupState(g uint16) GroupState {
	if g == 0 {
		return GroupServing
	}
	if gr, ok := st.groups[g]; ok {
		return gr.state
	}
	return 0
}

// Result is what applying one entry did.
type Result struct {
	// Err is the refusal (an *Error): the entry changed nothing. nil:
	// applied.
	Err error
	// Duplicate: the entry repeated one already applied (or a phase the
	// move already passed); it changed nothing.
	Duplicate bool
}

func refused(e *Error) Result { return Result{Err: e} }

var duplicate = Result{Duplicate: true}

// apply applies one command: it validates everything first and changes
// nothing when it refuses.
func (st *state) apply(cmd Command) Result {
	switch c := cmd.(type) {
	case *DirCreateGroup:
		return st.createGroup(c)
	case *DirMoveBegin:
		return st.moveBegin(c)
	case *DirMovePhase:
		return st.movePhase(c)
	case *DirMoveAbort:
		return st.moveAbort(c)
	case *DirSetGroupMembers:
		return st.setMembers(c)
	case *DirSetGroupState:
		return st.setGroupState(c)
	}
	return refused(refuse(CodeInvalid, "command %T is not a directory entry", cmd))
}

// checkSlotSet is the shape of every move entry's slot set: not empty,
// strictly ascending, each below fsm.Slots (fsm's own rule for its move
// entries, so that the directory's sets are the Freezes' sets).
func checkSlotSet(slots []uint16) *Error {
	if len(slots) == 0 {
		return refuse(CodeInvalid, "no slots")
	}
	for i, s := range slots {
		if s >= fsm.Slots {
			return refuse(CodeInvalid, "slot %d is not below %d", s, fsm.Slots)
		}
		if i > 0 && s <= slots[i-1] {
			return refuse(CodeInvalid, "slots are not strictly ascending at %d", s)
		}
	}
	return nil
}

// checkMembers is the shape of a member list: at least one voter, at most
// MaxMembers in all, each id not empty and at most MaxNodeIDBytes, each
// list strictly ascending, no voter also a non-voter.
func checkMembers(voters, nonvoters []string) *Error {
	if len(voters) == 0 {
		return refuse(CodeInvalid, "a group needs at least one voter")
	}
	if n := len(voters) + len(nonvoters); n > MaxMembers {
		return refuse(CodeInvalid, "%d members, more than %d", n, MaxMembers)
	}
	for _, l := range []struct {
		what string
		ids  []string
	}{{"voter", voters}, {"nonvoter", nonvoters}} {
		for i, id := range l.ids {
			if id == "" || len(id) > MaxNodeIDBytes {
				return refuse(CodeInvalid, "%s id %q is empty or longer than %d bytes", l.what, truncate(id), MaxNodeIDBytes)
			}
			if i > 0 && id <= l.ids[i-1] {
				return refuse(CodeInvalid, "%s ids are not strictly ascending at %q", l.what, truncate(id))
			}
		}
	}
	for _, id := range nonvoters {
		if _, ok := slices.BinarySearch(voters, id); ok {
			return refuse(CodeInvalid, "node %q is both a voter and a nonvoter", truncate(id))
		}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

func (st *state) createGroup(c *DirCreateGroup) Result {
	if err := checkMembers(c.Voters, c.Nonvoters); err != nil {
		return refused(err)
	}
	if c.Group == 0 {
		return refused(refuse(CodeGroupID, "group 0 is built in: it is never created"))
	}
	if g, ok := st.groups[c.Group]; ok {
		if slices.Equal(g.voters, c.Voters) && slices.Equal(g.nonvoters, c.Nonvoters) {
			return duplicate
		}
		return refused(refuse(CodeGroupID, "group %d exists with other members (voters %q, nonvoters %q)", c.Group, g.voters, g.nonvoters))
	}
	if c.Group == reservedGroup {
		return refused(refuse(CodeGroupID, "group %d is reserved", c.Group))
	}
	if c.Group != st.nextGroup {
		return refused(refuse(CodeGroupID, "group %d is not the next group id %d", c.Group, st.nextGroup))
	}
	st.groups[c.Group] = &group{voters: slices.Clone(c.Voters), nonvoters: slices.Clone(c.Nonvoters), state: GroupCreating}
	st.nextGroup++
	return Result{}
}

func (st *state) setMembers(c *DirSetGroupMembers) Result {
	if err := checkMembers(c.Voters, c.Nonvoters); err != nil {
		return refused(err)
	}
	if c.Group == 0 {
		return refused(refuse(CodeGroupID, "group 0's members are its raft configuration (join, leave), not the directory's"))
	}
	g, ok := st.groups[c.Group]
	if !ok {
		return refused(refuse(CodeUnknownGroup, "group %d does not exist", c.Group))
	}
	if slices.Equal(g.voters, c.Voters) && slices.Equal(g.nonvoters, c.Nonvoters) {
		return duplicate
	}
	g.voters, g.nonvoters = slices.Clone(c.Voters), slices.Clone(c.Nonvoters)
	return Result{}
}

func (st *state) setGroupState(c *DirSetGroupState) Result {
	if !c.State.valid() {
		return refused(refuse(CodeInvalid, "%s is not a group state", c.State))
	}
	if c.Group == 0 {
		return refused(refuse(CodeGroupID, "group 0 is always serving"))
	}
	g, ok := st.groups[c.Group]
	if !ok {
		return refused(refuse(CodeUnknownGroup, "group %d does not exist", c.Group))
	}
	if g.state == c.State {
		return duplicate
	}
	switch {
	case g.state == GroupCreating && c.State == GroupServing,
		g.state == GroupServing && c.State == GroupDraining,
		g.state == GroupDraining && c.State == GroupServing:
	default:
		return refused(refuse(CodeGroupState, "group %d cannot go from %s to %s", c.Group, g.state, c.State))
	}
	g.state = c.State
	return Result{}
}

func (st *state) moveBegin(c *DirMoveBegin) Result {
	if err := checkSlotSet(c.Slots); err != nil {
		return refused(err)
	}
	if c.From == c.To {
		return refused(refuse(CodeInvalid, "a move from group %d to itself", c.From))
	}
	if mv := st.moves[c.Slots[0]]; mv != nil && mv.from == c.From && mv.to == c.To && mv.epoch == c.Epoch && slices.Equal(mv.slots, c.Slots) {
		return duplicate // whatever its phase: this move began
	}
	if !st.exists(c.From) {
		return refused(refuse(CodeUnknownGroup, "group %d (from) does not exist", c.From))
	}
	if !st.exists(c.To) {
		return refused(refuse(CodeUnknownGroup, "group %d (to) does not exist", c.To))
	}
	if s := st.groupState(c.To); s != GroupServing {
		return refused(refuse(CodeGroupState, "group %d is %s, not serving: no move goes into it", c.To, s))
	}
	for _, s := range c.Slots {
		if mv := st.moves[s]; mv != nil && mv.phase.active() {
			return refused(refuse(CodeMoveInProgress, "slot %d is moving from group %d to %d at epoch %d (%s)", s, mv.from, mv.to, mv.epoch, mv.phase))
		}
		r := st.slots[s]
		if r.group != c.From {
			return refused(refuse(CodeWrongGroup, "slot %d is in group %d, not %d", s, r.group, c.From))
		}
		if c.Epoch <= r.epoch {
			return refused(refuse(CodeEpoch, "epoch %d is not above slot %d's epoch %d", c.Epoch, s, r.epoch))
		}
	}
	// Every record a slot of the set has is finished: it is forgotten,
	// for all of its slots, so that a slot is in at most one record and
	// a record's set is exactly its move's.
	for _, s := range c.Slots {
		if old := st.moves[s]; old != nil {
			for _, o := range old.slots {
				st.moves[o] = nil
			}
		}
	}
	mv := &move{slots: slices.Clone(c.Slots), from: c.From, to: c.To, epoch: c.Epoch, phase: PhaseBegun}
	for _, s := range c.Slots {
		st.moves[s] = mv
	}
	return Result{}
}

// moveOf is the record of the move of exactly slots at epoch, or the
// refusal that names what the first slot has instead.
func (st *state) moveOf(slots []uint16, epoch uint32) (*move, *Error) {
	mv := st.moves[slots[0]]
	switch {
	case mv == nil:
		return nil, refuse(CodeNoMove, "slot %d has no move", slots[0])
	case mv.epoch != epoch:
		return nil, refuse(CodeNoMove, "slot %d has no move at epoch %d (its move is at epoch %d)", slots[0], epoch, mv.epoch)
	case !slices.Equal(mv.slots, slots):
		return nil, refuse(CodeNoMove, "the move at epoch %d is of slots %s, not %s", epoch, fmtSlots(mv.slots), fmtSlots(slots))
	}
	return mv, nil
}

func (st *state) movePhase(c *DirMovePhase) Result {
	if err := checkSlotSet(c.Slots); err != nil {
		return refused(err)
	}
	if c.Phase < PhaseFrozen || c.Phase > PhaseDropped {
		return refused(refuse(CodeInvalid, "phase %s is not one DirMovePhase records (frozen, imported, flipped, dropped)", c.Phase))
	}
	if c.Phase == PhaseFrozen && c.FreezeL == 0 {
		return refused(refuse(CodeInvalid, "phase frozen without the Freeze's logical index"))
	}
	if c.Phase != PhaseFrozen && c.FreezeL != 0 {
		return refused(refuse(CodeInvalid, "freezeL %d with phase %s (only frozen has one)", c.FreezeL, c.Phase))
	}
	mv, err := st.moveOf(c.Slots, c.Epoch)
	if err != nil {
		return refused(err)
	}
	if mv.phase == PhaseAborted {
		return refused(refuse(CodePhase, "the move of slots %s at epoch %d was aborted", fmtSlots(mv.slots), mv.epoch))
	}
	if c.Phase <= mv.phase {
		if c.Phase == PhaseFrozen && c.FreezeL != mv.freezeL {
			return refused(refuse(CodePhase, "freezeL %d differs from the recorded %d", c.FreezeL, mv.freezeL))
		}
		return duplicate
	}
	if c.Phase != mv.phase+1 {
		return refused(refuse(CodePhase, "phase %s does not follow %s", c.Phase, mv.phase))
	}
	mv.phase = c.Phase
	switch c.Phase {
	case PhaseFrozen:
		mv.freezeL = c.FreezeL
	case PhaseFlipped:
		for _, s := range mv.slots {
			st.slots[s] = route{group: mv.to, epoch: mv.epoch}
		}
	}
	return Result{}
}

func (st *state) moveAbort(c *DirMoveAbort) Result {
	if err := checkSlotSet(c.Slots); err != nil {
		return refused(err)
	}
	mv, err := st.moveOf(c.Slots, c.Epoch)
	if err != nil {
		return refused(err)
	}
	switch mv.phase {
	case PhaseAborted:
		return duplicate
	case PhaseBegun, PhaseFrozen:
	default:
		return refused(refuse(CodeNoAbort, "the move of slots %s at epoch %d is %s: once imported it is only finished forward", fmtSlots(mv.slots), mv.epoch, mv.phase))
	}
	mv.phase = PhaseAborted
	for _, s := range mv.slots {
		st.slots[s] = route{group: mv.from, epoch: mv.epoch}
	}
	return Result{}
}

package placement

import "strconv"

// GroupState is where a group stands in the directory (groups.md §9).
type GroupState uint8

const (
	// GroupCreating: DirCreateGroup applied; the group manager starts the
	// group's replicas and its first leader proposes fsm's SetGroup. It
	// owns no slot and receives no move until it is serving.
	GroupCreating GroupState = 1
	// GroupServing: the mover saw the group running (its SetGroup
	// applied) and may move slots into it.
	GroupServing GroupState = 2
	// GroupDraining: no new move goes into the group; slots move out of
	// it (groups remove, rollback). It may go back to serving.
	GroupDraining GroupState = 3
)

var groupStateNames = [...]string{"", "creating", "serving", "draining"}

func (s GroupState) String() string {
	if s >= GroupCreating && s <= GroupDraining {
		return groupStateNames[s]
	}
	return "GroupState(" + strconv.Itoa(int(s)) + ")"
}

func (s GroupState) valid() bool { return s >= GroupCreating && s <= GroupDraining }

// ParseGroupState is the inverse of GroupState.String.
func ParseGroupState(s string) (GroupState, bool) {
	for i := GroupCreating; i <= GroupDraining; i++ {
		if groupStateNames[i] == s {
			return i, true
		}
	}
	return 0, false
}

// Phase is where a move stands (groups.md §12.1). Phases only go forward,
// one at a time: begun → frozen → imported → flipped → dropped, or
// begun or frozen → aborted.
type Phase uint8

const (
	// PhaseBegun: DirMoveBegin applied; the mover proposes the source's
	// Freeze next.
	PhaseBegun Phase = 1
	// PhaseFrozen: the source's Freeze committed, at logical index
	// FreezeL; the mover exports and imports next.
	PhaseFrozen Phase = 2
	// PhaseImported: the target's Import committed. From here the move
	// is only finished forward.
	PhaseImported Phase = 3
	// PhaseFlipped: the slots route to the target at the move's epoch.
	PhaseFlipped Phase = 4
	// PhaseDropped: the source's Drop committed: the move is done.
	PhaseDropped Phase = 5
	// PhaseAborted: the target's Reject and the source's Unfreeze
	// committed (in that order); the slots stay with the source, at the
	// move's epoch.
	PhaseAborted Phase = 6
)

var phaseNames = [...]string{"", "begun", "frozen", "imported", "flipped", "dropped", "aborted"}

func (p Phase) String() string {
	if p >= PhaseBegun && p <= PhaseAborted {
		return phaseNames[p]
	}
	return "Phase(" + strconv.Itoa(int(p)) + ")"
}

func (p Phase) valid() bool { return p >= PhaseBegun && p <= PhaseAborted }

// ParsePhase is the inverse of Phase.String.
func ParsePhase(s string) (Phase, bool) {
	for i := PhaseBegun; i <= PhaseAborted; i++ {
		if phaseNames[i] == s {
			return i, true
		}
	}
	return 0, false
}

// active reports whether a move in phase p is in progress: a slot may
// have a new move only once its last one is dropped or aborted.
func (p Phase) active() bool { return p >= PhaseBegun && p <= PhaseFlipped }

// GroupInfo is one group of the directory, as Groups returns it.
type GroupInfo struct {
	ID uint16
	// Voters and Nonvoters are node ids (the member directory's, fsm's
	// SetMember), each list strictly ascending. Group 0's are empty: its
	// membership is its own raft configuration (join, leave).
	Voters, Nonvoters []string
	State             GroupState
	// Slots is how many slots route to the group now.
	Slots int
}

// Move is one move of a slot set, as Moves and MoveOf return it. Its
// record stays after it is dropped or aborted, until a later move of one
// of its slots begins.
type Move struct {
	Slots    []uint16 // strictly ascending: every entry of the move names exactly these
	From, To uint16
	Epoch    uint32
	Phase    Phase
	// FreezeL is the logical index of the source's Freeze (recorded with
	// phase frozen; 0 before): the floor the target's Import carries.
	FreezeL uint64
}

// Active reports whether the move is in progress (begun, frozen,
// imported or flipped): the mover has work to do on it.
func (m Move) Active() bool { return m.Phase.active() }

package fsm

import (
	"math"
	"slices"
)

// Applying the move entries (groups.md §6.2, §7, §12). Each validates
// first and changes nothing when it refuses. None emits an event or a
// change: a move changes no lock, queue or session as its clients see
// them (the sessions, their requests and their event numbers move as they
// are); what a server does about streams and deadlines when it sees a
// Freeze or an Import applied is the server's (phase 3): Applied.Move
// tells it what changed, and SlotSessions lists the slots' sessions. A
// repeated entry of a move (the same epoch) answers Duplicate and changes
// nothing.

func moveDone() Result { return Result{Status: statusOK, Duplicate: true} }

func moveOK() Result { return Result{Status: statusOK} }

// applyMove applies a move entry (false: cmd is not one) and, when it
// changed the slots (not refused, not a repeat), says so in a.move
// (Applied.Move).
func (a *applier) applyMove(cmd Command) (Result, bool) {
	res, ok := a.applyMoveCmd(cmd)
	if ok && res.Err == nil && !res.Duplicate {
		a.move = moveApplied(cmd)
	}
	return res, ok
}

// moveApplied is the Applied.Move of a move entry that changed the slots:
// nil for the entries that change none (SetGroup, ImportChunk, Reject).
func moveApplied(cmd Command) *MoveApplied {
	switch c := cmd.(type) {
	case *Freeze:
		return &MoveApplied{Kind: MoveFreeze, Slots: slices.Clone(c.Slots), Epoch: c.Epoch, To: c.To}
	case *Import:
		return &MoveApplied{Kind: MoveImport, Slots: slices.Clone(c.Slots), Epoch: c.Epoch}
	case *Unfreeze:
		return &MoveApplied{Kind: MoveUnfreeze, Slots: slices.Clone(c.Slots), Epoch: c.Epoch}
	case *Drop:
		return &MoveApplied{Kind: MoveDrop, Slots: slices.Clone(c.Slots), Epoch: c.Epoch}
	}
	return nil
}

func (a *applier) applyMoveCmd(cmd Command) (Result, bool) {
	switch c := cmd.(type) {
	case *SetGroup:
		return a.setGroup(c), true
	case *Freeze:
		return a.freeze(c), true
	case *ImportChunk:
		return a.importChunk(c), true
	case *Import:
		return a.importSlots(c), true
	case *Reject:
		return a.reject(c), true
	case *Unfreeze:
		return a.unfreeze(c), true
	case *Drop:
		return a.drop(c), true
	}
	return Result{}, false
}

// checkMove is the shape shared by the move entries: a slot set and an
// epoch above 0 (epoch 0 is group 0's initial ownership).
func checkMove(what string, slots []uint16, epoch uint32) *Error {
	if err := checkSlotSet(slots); err != nil {
		return errorf(CodeInvalid, "%s: %v", what, err)
	}
	if epoch == 0 {
		return errorf(CodeInvalid, "%s: epoch 0 is no move's", what)
	}
	return nil
}

// wrongGroup refuses a SetGroup of another group (Machine.Apply checks
// it before anything, ApplyBytes makes it an error).
func wrongGroup(c *SetGroup, g uint16) *Error {
	if c.Group == g {
		return nil
	}
	return errorf(CodeInvalid, "SetGroup{%d} in the log of group %d: this data directory is another group's", c.Group, g)
}

func (a *applier) setGroup(c *SetGroup) Result {
	if err := wrongGroup(c, a.st.group); err != nil {
		return Result{Err: err}
	}
	if a.st.group == 0 || a.st.mv.groupSet {
		return moveDone() // group 0 needs none: its state stays the default
	}
	a.st.mv.groupSet = true
	return moveOK()
}

func (a *applier) freeze(c *Freeze) Result {
	st := a.st
	if err := checkMove("Freeze", c.Slots, c.Epoch); err != nil {
		return Result{Err: err}
	}
	if c.To == st.group {
		return Result{Err: errorf(CodeInvalid, "Freeze: group %d cannot move slots to itself", c.To)}
	}
	if mv := st.moveOf(c.Slots, c.Epoch); mv != nil && mv.to == c.To {
		return moveDone()
	}
	for _, s := range c.Slots {
		if ss := st.slots[s]; ss.kind != slotOwned || ss.epoch >= c.Epoch {
			return Result{Err: errorf(CodeInvalid, "Freeze: slot %d is not owned by group %d below epoch %d", s, st.group, c.Epoch)}
		}
	}
	set := setOf(c.Slots)
	mv := &outMove{slots: slices.Clone(c.Slots), epoch: c.Epoch, to: c.To, floorL: a.logical, tombs: freezeTombs(st, set)}
	if st.mv.out == nil {
		st.mv.out = make(map[uint16]*outMove)
	}
	for _, s := range c.Slots {
		st.slots[s] = slotState{kind: slotFrozen, to: c.To, epoch: c.Epoch}
		st.mv.out[s] = mv
	}
	st.computeOwnsAll()
	return moveOK()
}

// importReady is what ImportChunk and Import check first: the group may
// import (SetGroup applied in a group g ≥ 1), the move was not rejected,
// and each slot is importable at the epoch. done: the slots are owned at
// the epoch already (Import applied): a no-op.
func (a *applier) importReady(what string, slots []uint16, epoch uint32) (done bool, err *Error) {
	st := a.st
	if err := checkMove(what, slots, epoch); err != nil {
		return false, err
	}
	if st.group != 0 && !st.mv.groupSet {
		return false, errorf(CodeInvalid, "%s: group %d has not applied its SetGroup", what, st.group)
	}
	if st.allSlots(slots, slotState{kind: slotOwned, epoch: epoch}) {
		return true, nil
	}
	if st.rejectedAt(slots, epoch) {
		return false, errorf(CodeInvalid, "%s: the move of slots %v at epoch %d was rejected", what, slots, epoch)
	}
	for _, s := range slots {
		if !st.importable(s, epoch) {
			return false, errorf(CodeInvalid, "%s: slot %d cannot be imported by group %d at epoch %d (%s)", what, s, st.group, epoch, st.slots[s].describe())
		}
	}
	return false, nil
}

func (a *applier) importChunk(c *ImportChunk) Result {
	st := a.st
	done, err := a.importReady("ImportChunk", c.Slots, c.Epoch)
	if err != nil {
		return Result{Err: err}
	}
	if done {
		return moveDone()
	}
	k := keyOf(c.Slots, c.Epoch)
	sg := st.mv.staging[k]
	have := 0
	if sg != nil {
		have = len(sg.chunks)
	}
	switch {
	case int64(c.Seq) < int64(have):
		return moveDone()
	case int64(c.Seq) > int64(have):
		return Result{Err: errorf(CodeInvalid, "ImportChunk: chunk %d of slots %v at epoch %d comes before chunk %d", c.Seq, c.Slots, c.Epoch, have)}
	}
	fresh := sg == nil
	if fresh {
		sg = newStage(slices.Clone(c.Slots), c.Epoch)
	}
	if err := sg.add(c.Data); err != nil {
		return Result{Err: errorf(CodeInvalid, "ImportChunk: chunk %d of slots %v at epoch %d: %v", c.Seq, c.Slots, c.Epoch, err)}
	}
	if fresh {
		if st.mv.staging == nil {
			st.mv.staging = make(map[stageKey]*stage)
		}
		st.mv.staging[k] = sg
	}
	return moveOK()
}

// importSlots is Import: the checks, the offset (groups.md §7), the
// slots, then the staged objects made live.
func (a *applier) importSlots(c *Import) Result {
	st := a.st
	done, err := a.importReady("Import", c.Slots, c.Epoch)
	if err != nil {
		return Result{Err: err}
	}
	if done {
		return moveDone()
	}
	if c.FloorL > math.MaxUint64-MaxRawIndex-1 {
		return Result{Err: errorf(CodeInvalid, "Import: floor %d is out of range", c.FloorL)}
	}
	sg := st.mv.staging[keyOf(c.Slots, c.Epoch)]
	if sg == nil {
		sg = newStage(c.Slots, c.Epoch) // an export of empty slots has no chunk
	}
	if int64(len(sg.chunks)) != int64(c.N) {
		return Result{Err: errorf(CodeInvalid, "Import: %d chunks of slots %v at epoch %d are staged, the export has %d", len(sg.chunks), c.Slots, c.Epoch, c.N)}
	}
	if chunkSum(sg.chunks) != c.SHA256 {
		return Result{Err: errorf(CodeInvalid, "Import: the staged chunks of slots %v at epoch %d do not match the export's SHA-256", c.Slots, c.Epoch)}
	}
	if err := sg.check(st, c.FloorL, a.index); err != nil {
		return Result{Err: errorf(CodeInvalid, "Import: slots %v at epoch %d: %v", c.Slots, c.Epoch, err)}
	}
	// The offset: L(i) = i + offset > F_L, without underflow; it never
	// decreases.
	if c.FloorL+1 > a.index+st.offset {
		st.offset = c.FloorL + 1 - a.index
		a.logical = st.logical(a.index)
	}
	for _, s := range c.Slots {
		st.slots[s] = slotState{kind: slotOwned, epoch: c.Epoch}
		delete(st.mv.rejected, s)
	}
	st.dropStages(c.Slots, c.Epoch)
	st.computeOwnsAll()
	st.adopt(sg)
	return moveOK()
}

// adopt makes a checked stage's objects live: namespaces, sessions
// (merged into the id order), requests, records, tombstones, and the
// state's counters. Nothing is granted: the source's queues had no
// grantable head, and that is checked.
func (st *state) adopt(sg *stage) {
	for _, name := range sg.names {
		ns := sg.spaces[name]
		ns.cow = st.cow
		st.namespaces[name] = ns
		st.nRecords += len(ns.records)
	}
	for _, s := range sg.sessions {
		s.trim(st.limits.maxFinished) // SetLimits skipped it while frozen
		st.sessions[s.id] = s
		for r := s.liveHead; r != nil; r = r.snext {
			st.requests[r.key()] = r
			if r.maxHolders > 0 {
				st.nSemaphores++
			}
		}
	}
	st.nHeld += sg.nHeld
	st.nPending += sg.nPending
	st.mergeSessions(sg.sessions)
	for _, t := range sg.tombs {
		st.closed.add(t)
	}
}

// mergeSessions links sessions, in ascending id order and none of them
// linked, into the state's id order: one walk back from the tail.
func (st *state) mergeSessions(ss []*session) {
	cur := st.sessTail
	for i := len(ss) - 1; i >= 0; i-- {
		s := ss[i]
		for cur != nil && cur.id > s.id {
			cur = cur.older
		}
		st.linkAfter(cur, s)
		if sessionGroup(s.id) == st.group && (st.ownLast == nil || s.id > st.ownLast.id) {
			st.ownLast = s
		}
	}
}

func (a *applier) reject(c *Reject) Result {
	st := a.st
	if err := checkMove("Reject", c.Slots, c.Epoch); err != nil {
		return Result{Err: err}
	}
	for _, s := range c.Slots {
		switch ss := st.slots[s]; {
		case ss.kind == slotOwned && ss.epoch >= c.Epoch:
			return Result{Err: errorf(CodeInvalid, "Reject: slot %d was imported at epoch %d: the move is finished forward", s, ss.epoch)}
		case ss.kind == slotFrozen:
			return Result{Err: errorf(CodeInvalid, "Reject: slot %d is moving out of group %d, not into it", s, st.group)}
		}
	}
	if st.rejectedAt(c.Slots, c.Epoch) && func() bool {
		for _, s := range c.Slots {
			if st.mv.rejected[s] < c.Epoch {
				return false
			}
		}
		return true
	}() {
		return moveDone()
	}
	st.dropStages(c.Slots, c.Epoch)
	if st.mv.rejected == nil {
		st.mv.rejected = make(map[uint16]uint32)
	}
	for _, s := range c.Slots {
		if e, ok := st.mv.rejected[s]; !ok || e < c.Epoch {
			st.mv.rejected[s] = c.Epoch
		}
	}
	return moveOK()
}

func (a *applier) unfreeze(c *Unfreeze) Result {
	st := a.st
	if err := checkMove("Unfreeze", c.Slots, c.Epoch); err != nil {
		return Result{Err: err}
	}
	mv := st.moveOf(c.Slots, c.Epoch)
	if mv == nil {
		if st.allSlots(c.Slots, slotState{kind: slotOwned, epoch: c.Epoch}) {
			return moveDone()
		}
		return Result{Err: errorf(CodeInvalid, "Unfreeze: slots %v are not frozen at epoch %d by one Freeze of exactly them", c.Slots, c.Epoch)}
	}
	for _, s := range c.Slots {
		st.slots[s] = slotState{kind: slotOwned, epoch: c.Epoch}
		delete(st.mv.out, s)
	}
	st.computeOwnsAll()
	// SetLimits skipped the slots' sessions while they were frozen: they
	// are trimmed now, as an Import trims them.
	set := setOf(c.Slots)
	for s := st.sessHead; s != nil; s = s.newer {
		if set.has(s.ns.name) {
			s.trim(st.limits.maxFinished)
		}
	}
	return moveOK()
}

func (a *applier) drop(c *Drop) Result {
	st := a.st
	if err := checkMove("Drop", c.Slots, c.Epoch); err != nil {
		return Result{Err: err}
	}
	mv := st.moveOf(c.Slots, c.Epoch)
	if mv == nil {
		if len(c.Slots) > 0 && st.slots[c.Slots[0]].kind == slotGone &&
			st.allSlots(c.Slots, slotState{kind: slotGone, to: st.slots[c.Slots[0]].to, epoch: c.Epoch}) {
			return moveDone()
		}
		return Result{Err: errorf(CodeInvalid, "Drop: slots %v are not frozen at epoch %d by one Freeze of exactly them", c.Slots, c.Epoch)}
	}
	set := setOf(c.Slots)
	for s := st.sessHead; s != nil; {
		next := s.newer
		if set.has(s.ns.name) {
			for r := s.liveHead; r != nil; r = r.snext {
				delete(st.requests, r.key())
				if r.maxHolders > 0 {
					st.nSemaphores--
				}
			}
			delete(st.sessions, s.id)
			st.unlinkSession(s)
		}
		s = next
	}
	for name, ns := range st.namespaces {
		if set.has(name) {
			st.nHeld -= ns.nHeld
			st.nPending -= ns.nPending
			st.nRecords -= len(ns.records)
			delete(st.namespaces, name)
		}
	}
	for _, s := range c.Slots {
		st.slots[s] = slotState{kind: slotGone, to: mv.to, epoch: c.Epoch}
		delete(st.mv.out, s)
	}
	st.computeOwnsAll()
	return moveOK()
}

// describe names a slot's state for a message.
func (ss slotState) describe() string {
	switch ss.kind {
	case slotOwned:
		return "owned at epoch " + itoa(uint64(ss.epoch))
	case slotFrozen:
		return "frozen, moving to group " + itoa(uint64(ss.to)) + " at epoch " + itoa(uint64(ss.epoch))
	case slotGone:
		return "gone to group " + itoa(uint64(ss.to)) + " at epoch " + itoa(uint64(ss.epoch))
	}
	return "absent"
}

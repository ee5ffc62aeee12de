package server

import (
	"strconv"

	"github.com/lockcluster/lockcluster/fsm"
)

// Groups groundwork (issue 27 phase 1, shared/design/groups.md; fsm's
// DESIGN.md, "Groups groundwork"). A Machine serves only the namespaces
// of the slots its group owns; group 0, the only group so far, owns every
// slot, so nothing here changes what a node answers (groups.md I4).
//
//   - Indexes. Every index a client sees, or that is compared with one a
//     client sent, is logical (fsm.Machine.Logical, LastLogical; §6.4):
//     the responses' and events' index, Synced, Query, GetRecord, the
//     watch's snapshot, changes and progress, min_index and from_index,
//     and SaveSnapshot's header. The raw Raft index stays internal: raft,
//     the hub's and the watch history's bookkeeping, Status and Members.
//     With one group the offset is 0 and the two are equal.
//   - Ownership before any session lookup (§3.1). The fsm's checked reads
//     (CheckSession, Precheck, the applies) refuse a slot not owned with
//     CodeMoving or CodeMoved, which rpcerr maps to a retryable
//     Unavailable. Where this package itself would answer "empty" or
//     "session closed" from a read that has no error of its own (Query,
//     GetRecord, a watch's snapshot, a session stream's sync and its end),
//     it asks owns first: a replica that does not own a slot answers
//     "moving", never "closed", since "closed" (FailedPrecondition) ends
//     the client's session.

// owns is the ownership check of this package's own reads: nil when this
// group serves namespace ns and, when session is not 0, the namespace of
// that session (which the fsm knows; an unknown session passes), else the
// refusal as an error (rpcerr maps it). The namespace comes first: a
// session of a slot moved away may be unknown here.
func (s *Server) owns(ns string, session uint64) error {
	if err := s.m.Owns(ns); err != nil {
		return err
	}
	if session != 0 {
		if err := s.m.OwnsSession(session); err != nil {
			return err
		}
	}
	return nil
}

// ownedSessions splits ids into those whose slot this group serves (or
// that it does not know) and those it refuses (OwnsSession), in order;
// ids itself, unsplit, when none is refused (always, with one group, at
// the cost of one read lock).
func (s *Server) ownedSessions(ids []uint64) (owned, refused []uint64) {
	refused = s.m.RefusedSessions(ids)
	if len(refused) == 0 {
		return ids, nil
	}
	// refused is a subsequence of ids: one walk splits them.
	owned = make([]uint64, 0, len(ids)-len(refused))
	j := 0
	for _, id := range ids {
		if j < len(refused) && refused[j] == id {
			j++
			continue
		}
		owned = append(owned, id)
	}
	return owned, refused
}

// sessionEnded is the error that ends session id's stream in ns when the
// session is not open here (ended, or unknown to the leader's liveness):
// "closed", unless this group does not serve the session's slot, which
// answers "moving" (owns). It runs only at a stream's end.
func (s *Server) sessionEnded(ns string, id uint64, msg string) error {
	if err := s.owns(ns, id); err != nil {
		return toStatus(err)
	}
	return toStatus(&fsm.Error{Code: fsm.CodeSessionClosed, Msg: "session " + strconv.FormatUint(id, 10) + " " + msg})
}

// movingErr is the error that ends session id's stream in ns when its
// slot moves to another group (a Freeze applied here, or the leader's
// refusal of its renewal: session.ErrMoved): this replica's own refusal
// when it has one, else CodeMoving for ns, which this replica has not
// seen frozen yet. Either is a retryable Unavailable with "moving" in its
// metadata, never "closed" (FailedPrecondition ends the client's
// session).
func (s *Server) movingErr(ns string, id uint64) error {
	if err := s.owns(ns, id); err != nil {
		return toStatus(err)
	}
	return toStatus(fsm.MovingError(ns, "session "+strconv.FormatUint(id, 10)+" of namespace "+strconv.Quote(ns)+" was not renewed: its slot is moving to another group; attach again"))
}

// Package placement is the cluster directory of the multi-Raft-groups
// design (shared/design/groups.md §9): a deterministic state machine
// that group 0's raft adapter applies beside the lock manager (package
// fsm), for the log entries of types 32 and up (IsEntry).
//
// What it owns:
//
//   - the routing table: for each of fsm.Slots slots, the group it routes
//     to and the epoch of that route (Lookup, LookupSlot);
//   - the groups beyond group 0: their members (node ids) and their state,
//     creating, serving or draining (Groups), and the next group id;
//   - the moves: for each slot set being moved, where from and to, its
//     epoch and its phase, begun → frozen → imported → flipped → dropped,
//     or aborted before imported (Moves, MoveOf), so that a new mover
//     resumes a move from the phase the log recorded;
//   - its part of group 0's snapshots (Encode, Restore), written only when
//     the directory is not the default state (Empty): with one group,
//     group 0's snapshots stay byte-identical (groups.md I4).
//
// What it does not own:
//
//   - ownership. Which group serves a slot is decided only by each group's
//     fsm.Machine, from its own log (groups.md I1): a group applies a
//     namespace-scoped command only for a slot it owns, whatever the
//     directory says. The directory routes and drives: the router reads it
//     to pick a group (a stale route reaches a group that answers
//     MOVING/MOVED, and the router follows), and the mover records here
//     what it has done, after the groups' own entries (Freeze, Import,
//     Drop, Reject, Unfreeze) committed. Nothing here is checked against
//     those groups' states, which this package cannot see.
//   - the member directory (node id → addresses): fsm's SetMember, in
//     group 0's fsm.Machine. Group 0's own membership is its raft
//     configuration (join, leave), not recorded here.
//   - proposing, timing, retrying, the version gate: the mover's
//     (phase 4).
//
// Every entry is validated before it changes anything; a refused entry
// (Result.Err, an *Error with a Code) changes nothing, and a repeated one
// is a no-op answered Result.Duplicate. Only an entry that does not decode
// is an error of Apply, and the caller stops the replica. Nothing here
// reads a clock or a random source, and no map is iterated into output
// unsorted: every replica that applies the same entries has the same
// state and the same snapshot bytes.
//
// DESIGN.md has the decisions the design left open.
package placement

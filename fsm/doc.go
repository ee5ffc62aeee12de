// Package fsm owns the lock manager: the Web Locks scheduling algorithm as a
// deterministic state machine that every Raft replica applies in log order.
//
// It imports only the standard library. Time, identity and ordering come in
// through the log: each Entry carries the leader's clock reading, the Raft
// index of the entry is the version of the state, the id of a session opened
// by it, and (plus the group's offset, 0 with one group) the fencing token
// of every lock it grants. Apply never reads a
// clock, never draws a random number and never lets Go's map order reach a
// result, an event, a query or a snapshot, so every replica that applies the
// same entries reaches the same state (Digest) and emits the same events.
//
// The state, per namespace (the spec's origin):
//
//   - the held lock set, in grant order;
//   - the lock request queue map, its queues in creation order (an emptied
//     queue is dropped and created anew at the end when needed);
//   - the sessions (the spec's agents), each with its live requests in
//     creation order and a bounded table of finished outcomes that makes
//     retried requests, releases and aborts idempotent.
//
// A request may name several resources (a scope). It is queued on every name
// at once and granted on every name at once, only when it is at the head of
// every one of its queues and no held lock conflicts on any of its names.
// Since requests enter all their queues in log order, the queues agree on the
// relative order of any two requests, so scoped requests cannot deadlock.
//
// A name may carry a record (SPEC §12, apply_record.go): bytes written only
// by the session that holds the name exclusively, with its grant's token,
// checked at apply. A record outlives its writer's grant and session, and
// keeps its namespace alive; a grant carries the records of its names. A
// shared request may make its names a semaphore of N holders (SPEC §14):
// every shared request of a name agrees on N.
//
// Apply returns the entry's Result (errors are values: a rejected request
// changes nothing) and the ordered Events it caused, each addressed to one
// session. Delivering those events is the caller's job; this package does no
// I/O. A machine that serves watches (SPEC §13) keeps Changes too: what the
// entry changed in its namespace, in order (change.go).
//
// Beside the commands, one table (AdmissionOf, admission.go) says what a
// caller must show before the API proposes each command type: the
// session's secret, nothing (with the reason), or that only a node
// proposes it. A type the table lacks is refused: the default is deny.
// Another (level.go) says which protocol level introduced each command
// type and snapshot format, so that nothing is proposed that a member of
// an older release in a rolling upgrade could not apply.
//
// A cluster may come to run several Raft groups (groups.go; DESIGN.md,
// "Groups groundwork"): each Machine is one group's, serves only the
// namespaces whose slot (Slot: CRC-32C mod 4,096) it owns, refusing the
// others with CodeMoving or CodeMoved before anything else, and gives
// tokens and indexes that are logical: the Raft index plus the group's
// offset. Group 0, which New makes, owns every slot with offset 0, so
// with one group tokens are the Raft index and everything is as before.
// Seven entries move slots between groups inside the state machine
// (move_*.go; DESIGN.md, "Moves (phase 2)"): Freeze on the source, an
// Export of the frozen slots, ImportChunk and Import on the target (which
// raises its offset above the source's Freeze, so tokens only grow),
// then Drop on the source; or, to abort, Reject on the target and then
// Unfreeze on the source. They are at LevelGroups, which no server
// proposes yet.
//
// See DESIGN.md beside this file for the invariants and the mapping of
// every function to a step of the spec.
//
// This package is implementation, not API: it makes no compatibility
// promise, and it exports only what other lockcluster packages use. The
// stable API is the client (package lockcluster) and the wire contract
// (api/lockclusterv1).
package fsm

// Package session owns session liveness on the leader (SPEC §4): every
// session's deadline, held in memory and renewed by heartbeats (heartbeats
// are never logged); the grace the leader waits past a TTL (Expiry); the
// expiry proposed when a deadline passes; the re-arm of every session when
// this node gains leadership, only after it has applied the whole log; and
// the heartbeat path, which renews on the leader and, on a follower,
// batches heartbeats and forwards them to the leader. The leader
// acknowledges a renewal only once a quorum has confirmed its leadership
// after it (one confirmation covers many renewals). Followers expire
// nothing.
//
// Liveness is the one entry point. It reaches the rest of the node through
// the small interfaces it defines (Expirer, Log, Forwarder), which
// internal/server implements over the log and gRPC. DESIGN.md gives the
// timeline: how the client's jeopardy deadline and the leader's expiry
// relate, and what happens on a change of leader.
//
// This is implementation, with no compatibility promise: only internal/server
// uses it.
package session

package session

import "time"

// Expiry is how long the leader waits, from the moment it renews a session
// (a heartbeat, or the re-arm of a new leader), before it expires it: the
// TTL and a grace of a tenth more, at least 50 ms.
//
// The client (the root package's session.go) gives its locks up exactly one
// TTL after the *send* time of its last acknowledged heartbeat: that send
// came before the leader's renewal, so the client's jeopardy deadline falls
// at least one grace before the leader's expiry. The grace absorbs the
// client's timer firing late and the difference in rate between the two
// machines' monotonic clocks, so that a holder has given its locks up
// before the cluster can hand them to anyone else. This comment and
// DESIGN.md, "The timeline", are the only statements of this relation.
func Expiry(ttl time.Duration) time.Duration {
	return ttl + max(ttl/10, 50*time.Millisecond)
}

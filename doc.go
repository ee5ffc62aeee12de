// Package lockcluster is the Go client of lockcluster, a distributed lock
// service with the semantics of the browser's Web Locks API
// (navigator.locks): named resources, exclusive and shared modes, per-name
// FIFO queues, ifAvailable, steal, abort, and query, served by a
// replicated Raft state machine.
//
// A Client holds one session (the spec's agent) in one namespace (the
// spec's origin). It keeps the session alive with heartbeats, fails over
// between the endpoints it was given, and ends the session on Close: its
// pending requests are aborted and its locks released.
//
//	c, err := lockcluster.Dial(ctx, []string{"127.0.0.1:7700", "127.0.0.1:7710", "127.0.0.1:7720"})
//	if err != nil { ... }
//	defer c.Close(context.Background())
//	err = c.Request(ctx, "invoices", lockcluster.Options{}, func(ctx context.Context, l *lockcluster.Lock) error {
//		// The lock is held here; ctx is cancelled if it is lost.
//		return writeInvoices(ctx, l.Token())
//	})
//
// Every lock carries a fencing token, the Raft index of the entry that
// granted it: tokens only grow, so a resource server that remembers the
// highest token it has seen can refuse a stale holder's writes.
//
// Jeopardy: the client counts its locks as lost once a whole TTL has passed
// since the send time of its last acknowledged heartbeat; it cancels every
// held lock's context then, before the cluster can expire the session and
// grant the locks to anyone else (given clocks that run at about the same
// rate).
package lockcluster

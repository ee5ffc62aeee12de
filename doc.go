// Package lockcluster is the Go client of lockcluster, a distributed lock
// service with the semantics of the browser's Web Locks API
// (navigator.locks): named resources, exclusive and shared modes, per-name
// FIFO queues, ifAvailable, steal, abort, and query, served by a
// replicated Raft state machine.
//
// # The spec in Go
//
// A Client holds one session, the spec's agent, in one namespace, the
// spec's origin. It keeps the session alive with heartbeats, fails over
// between the endpoints it was given, and ends the session on Close: its
// pending requests are aborted and its locks released.
//
//   - navigator.locks.request(name, options, callback) is [Client.Request];
//     the callback's returned promise is fn's return, and the request's
//     released promise is Request's return. [Client.Acquire] is the same
//     request for code that cannot use a callback.
//   - LockOptions is [Options]: Mode (Exclusive or Shared; any other value is
//     a TypeError), IfAvailable, Steal, and, beyond the spec, Scope (several
//     names at once) and OnQueued.
//   - The AbortSignal is the request's context.Context.
//   - navigator.locks.query() is [Client.Query]; the clientId it shows is
//     [Client.ClientID], and [Lock.RequestID] finds a held lock's entry.
//
// For example:
//
//	c, err := lockcluster.Dial(ctx, []string{"127.0.0.1:7700", "127.0.0.1:7710", "127.0.0.1:7720"})
//	if err != nil { ... }
//	defer c.Close(context.Background())
//	err = c.Request(ctx, "invoices", lockcluster.Options{}, func(ctx context.Context, l *lockcluster.Lock) error {
//		// The lock is held here; ctx is cancelled if it is lost.
//		return writeInvoices(ctx, l.Token())
//	})
//
// # Outcomes
//
// Granted: fn runs with the *Lock (Acquire returns it). Not available
// (IfAvailable, the lock taken): fn runs with a nil *Lock, which is not an
// error; Acquire returns ErrNotAvailable. Aborted (ctx done before the
// grant): fn does not run, and the error matches ErrAborted and
// context.Cause(ctx). When the abort races the grant, that is when ctx is
// done by the time the grant reaches Request, the abort wins: the lock is
// released at once and the caller gets the same AbortError, never the lock.
//
// Stolen (another request used Steal) or session lost (expired, closed,
// or jeopardy, below): the holder's lock context is cancelled with cause
// ErrStolen or ErrSessionLost, and Request returns an error matching that
// cause and ErrAborted, as the spec rejects the released promise with an
// AbortError. Both causes match ErrAborted themselves.
//
// # Errors
//
// Every error matches one sentinel with errors.Is, and errors answered by
// the cluster are an *Error carrying the spec's name: NotSupportedError
// (ErrNotSupported: a name starting with "-", steal with ifAvailable or
// shared mode), AbortError (ErrAborted), SecurityError (ErrPermission),
// InvalidStateError (ErrSessionClosed: the session is closed or expired;
// Acquire, Request and Query on a closed Client), TypeError (ErrInvalid: bad UTF-8, an
// unknown mode, a nil callback), and, beyond the spec, ErrLimit and
// ErrUnavailable.
//
// # Fencing tokens
//
// Every lock carries a fencing token, the Raft index of the entry that
// granted it: tokens only grow, so a resource server that remembers the
// highest token it has seen can refuse a stale holder's writes.
//
// # Jeopardy
//
// The client counts its locks as lost once a whole TTL has passed since
// the send time of its last acknowledged heartbeat; it cancels every held
// lock's context then, before the cluster can expire the session and grant
// the locks to anyone else (given clocks that run at about the same rate).
// A lock's context (Err, Done) and Lock.Err also compare the clock with
// that deadline on every look, so a holder that was paused past it sees
// the loss on its first check after it resumes. A session stream whose
// heartbeats go unacknowledged for a third of the TTL moves to another
// endpoint; a request answered "session not open" ends the session, and
// the next call opens a new one.
//
// # Compatibility
//
// This package and the wire contract, package api/lockclusterv1 (the
// lockcluster.v1 gRPC service), are lockcluster's stable API: the promise
// is theirs. Every other package of the module (fsm, raftnode, session,
// internal/server, internal/node and the rest) is implementation with no
// compatibility promise, importable only so that the lockcluster command
// and the tests can share it. This package imports none of them, only the
// wire contract (imports_test.go checks).
package lockcluster

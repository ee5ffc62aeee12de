package loadgen

import (
	"context"
	"errors"
)

// ErrNotAvailable is what Session.Lock returns when an ifAvailable request
// finds the lock taken.
var ErrNotAvailable = errors.New("bench: lock not available")

// Driver opens sessions on a lock service. Its sessions must be safe for
// concurrent use by several workers.
type Driver interface {
	// Name names the service in reports ("lockcluster", "etcd").
	Name() string
	// Open opens a session: the unit that holds locks and is kept alive by
	// heartbeats (a lockcluster session, an etcd lease).
	Open(ctx context.Context) (Session, error)
	// Close releases what the driver holds (connections).
	Close() error
}

// Session holds locks.
type Session interface {
	// Lock waits for the lock on name (shared or exclusive) and returns it.
	// With ifAvailable it returns ErrNotAvailable at once if it is taken.
	// Cancelling ctx abandons the wait.
	Lock(ctx context.Context, name string, shared, ifAvailable bool) (Held, error)
	// Close ends the session (its locks are released).
	Close(ctx context.Context) error
}

// Held is a held lock.
type Held interface {
	Release(ctx context.Context) error
}

// Expirer is implemented by sessions that can tell whether the service
// ended them (expired or closed) while the benchmark ran.
type Expirer interface {
	Lost() bool
}

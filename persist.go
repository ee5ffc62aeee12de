package lockcluster

import (
	"context"
	"errors"
	"time"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// A release or an abort that its caller stopped waiting for (its context
// ended, or the cluster answered with an error that says nothing about the
// lock, such as a timeout of the node's own) is not given up: a lock whose
// holder let go of it, or a request nobody waits for, would otherwise stay
// in the cluster for as long as the session lives, and a session lives as
// long as its client heartbeats. Every lock queued behind it would wait
// forever (docs/chaos.md, finding 6). So the client goes on sending it, with
// the same request id (a retry is never applied twice), until the cluster
// answers it, the session ends, or the client is closed.

// persistBackoff bounds the wait between two rounds of persist.
const persistBackoff = time.Second

// persist sends f until it succeeds or gets a final answer, the session
// ends, or the client is closed, and returns the last error (nil once
// the cluster answered). Client.call already retries on every endpoint
// while the cluster is unavailable; persist also retries what call gives
// back as a failure that says nothing of the lock (deadline exceeded,
// internal, rate limits), after a backoff.
func (s *clientSession) persist(f func(context.Context, pb.LocksClient) error) error {
	backoff := 50 * time.Millisecond
	for {
		err := s.c.call(s.ctx, f)
		if err == nil || final(err) || s.ctx.Err() != nil || s.c.closedErr() != nil {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff = min(2*backoff, persistBackoff)
	}
}

// final reports whether err is an answer about the lock or the session
// that sending the call again cannot change: the session has ended (its
// locks with it), the call is malformed, or it is not allowed (a record
// write by a lock that is no longer held).
func final(err error) bool {
	return errors.Is(err, ErrSessionClosed) || errors.Is(err, ErrInvalid) ||
		errors.Is(err, ErrPermission) || errors.Is(err, ErrNotSupported) || errors.Is(err, ErrNotHolder)
}

package raftnode

import (
	"context"
	"time"

	"github.com/hashicorp/raft"
)

// await waits for f, ctx or the end of raft, whichever comes first.
// resolved reports whether f itself answered; if not, err is ctx's error
// or ErrShutdown, and f's outcome is unknown.
//
// raft's futures cannot be selected on, so a goroutine waits for f. It
// ends when f resolves; raft leaves unanswered the futures still queued
// when it shuts down, so a call racing with Shutdown can leave that
// goroutine blocked for the life of the process.
func (n *Node) await(ctx context.Context, f raft.Future) (resolved bool, err error) {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return true, err
	case <-ctx.Done():
	case <-n.stopped:
	}
	select { // prefer f's own answer if it is there
	case err := <-done:
		return true, err
	default:
	}
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	return false, ErrShutdown
}

// withTimeout applies defaultTimeout to a context without a deadline, and
// returns the time left, which raft takes as its enqueue timeout.
func withTimeout(ctx context.Context) (context.Context, context.CancelFunc, time.Duration) {
	if _, ok := ctx.Deadline(); !ok {
		c, cancel := context.WithTimeout(ctx, defaultTimeout)
		return c, cancel, defaultTimeout
	}
	return ctx, func() {}, timeLeft(ctx)
}

// isClosing reports whether Shutdown has started.
func (n *Node) isClosing() bool {
	select {
	case <-n.closing:
		return true
	default:
		return false
	}
}

// timeLeft is the time until ctx's deadline (which withTimeout guarantees),
// used as raft's enqueue timeout.
func timeLeft(ctx context.Context) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return defaultTimeout
	}
	return max(time.Until(dl), time.Nanosecond)
}

// sleepCtx waits d or until ctx ends, and reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

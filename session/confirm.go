package session

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// confirmTimeout bounds one confirmation of leadership: a leader that
// cannot have it confirmed in time acknowledges none of the renewals it
// covers.
const confirmTimeout = 2 * time.Second

// confirmer confirms, for the leader's renewals, that a quorum still
// accepts this node as leader (DESIGN.md, "A change of leader"). A
// renewal is acknowledged only once a confirmation that *started after
// it* has succeeded, so every renewal waiting joins the round that has not
// started yet, never the one in flight. One round covers every renewal
// made before it started, and rounds start at most once per interval
// (Flush): with 100,000 idle sessions the leader runs a few confirmations
// per tick, not one per heartbeat, and an idle leader starts one at once.
type confirmer struct {
	log   Log
	every time.Duration
	mu    sync.Mutex
	next  *round // the round the renewals made since the last start wait for
	ended error  // set once run has returned: nothing is confirmed any more
	kick  chan struct{}
}

// round is one confirmation; done is closed once err is set, and then
// each of then is called with err.
type round struct {
	done chan struct{}
	err  error
	then []func(error) // guarded by confirmer.mu until the round starts
}

func newConfirmer(log Log, every time.Duration) *confirmer {
	return &confirmer{log: log, every: every, kick: make(chan struct{}, 1)}
}

// wait returns nil once a confirmation that started after the call has
// succeeded: call it after the renewal. Its error wraps ErrNotLeading when
// the confirmation failed, or is ctx's.
func (c *confirmer) wait(ctx context.Context) error {
	c.mu.Lock()
	if c.ended != nil {
		c.mu.Unlock()
		return c.ended
	}
	if c.next == nil {
		c.next = &round{done: make(chan struct{})}
	}
	r := c.next
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitAsync is wait without blocking: done is called, with wait's result,
// once a confirmation that started after the call has ended (on the
// confirmer's goroutine: it must not block), or at once if the confirmer
// has stopped.
func (c *confirmer) waitAsync(done func(error)) {
	c.mu.Lock()
	if c.ended != nil {
		err := c.ended
		c.mu.Unlock()
		done(err)
		return
	}
	if c.next == nil {
		c.next = &round{done: make(chan struct{})}
	}
	c.next.then = append(c.next.then, done)
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// run starts a round when renewals wait for one, one interval after the
// previous round started at the earliest, until ctx ends; then every
// renewal still waiting fails.
func (c *confirmer) run(ctx context.Context) {
	var last time.Time // when the previous round started
	for {
		select {
		case <-ctx.Done():
			c.end(ctx.Err())
			return
		case <-c.kick:
		}
		if gap := c.every - time.Since(last); !last.IsZero() && gap > 0 {
			if !sleep(ctx, gap) { // renewals arriving meanwhile join this round
				c.end(ctx.Err())
				return
			}
		}
		c.mu.Lock()
		r := c.next
		c.next = nil // renewals from now on wait for the round after this one
		c.mu.Unlock()
		if r == nil {
			continue
		}
		last = time.Now()
		cctx, cancel := context.WithTimeout(ctx, confirmTimeout)
		if err := c.log.Confirm(cctx); err != nil {
			r.err = fmt.Errorf("%w: leadership not confirmed: %v", ErrNotLeading, err)
		}
		cancel()
		r.finish()
	}
}

// finish publishes the round's outcome, set in err.
func (r *round) finish() {
	close(r.done)
	for _, done := range r.then {
		done(r.err)
	}
}

func (c *confirmer) end(err error) {
	c.mu.Lock()
	c.ended = fmt.Errorf("%w: %v", ErrNotLeading, err)
	r := c.next
	c.next = nil
	if r != nil {
		r.err = c.ended
	}
	c.mu.Unlock()
	if r != nil {
		r.finish()
	}
}

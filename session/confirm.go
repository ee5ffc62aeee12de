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
	rep   Replica
	every time.Duration
	mu    sync.Mutex
	next  *round // the round the renewals made since the last start wait for
	ended error  // set once run has returned: nothing is confirmed any more
	kick  chan struct{}
}

// round is one confirmation; done is closed once err is set.
type round struct {
	done chan struct{}
	err  error
}

func newConfirmer(rep Replica, every time.Duration) *confirmer {
	return &confirmer{rep: rep, every: every, kick: make(chan struct{}, 1)}
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
		if err := c.rep.Confirm(cctx); err != nil {
			r.err = fmt.Errorf("%w: leadership not confirmed: %v", ErrNotLeading, err)
		}
		cancel()
		close(r.done)
	}
}

func (c *confirmer) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = fmt.Errorf("%w: %v", ErrNotLeading, err)
	if c.next != nil {
		c.next.err = c.ended
		close(c.next.done)
		c.next = nil
	}
}

package session

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// touchForwardTimeout bounds one forwarded batch of heartbeats (the
// follower's Cluster.Touch call) and the leader's wait, in Renew, for the
// confirmation of its leadership: a leader that does not answer in time
// renewed nothing, and the heartbeats the batch carried go unacknowledged.
//
// It is shorter than internal/server's rpcForwardTimeout (5 s, one
// forwarded client call), and a different bound: a renewal writes nothing
// to the log (the leader's work is in memory plus one VerifyLeader round),
// and an acknowledgement is worth having only while the client still
// waits for it: it moves to another node after TTL/3 without one (3.3 s at
// the default 10 s TTL). A forwarded write, by contrast, waits for a
// quorum's disks and is retried by the client with the same request id.
const touchForwardTimeout = 2 * time.Second

// batcher gathers the heartbeats a follower receives for one Flush and
// forwards them to the leader in one call, so that 100,000 idle sessions
// cost the leader a few calls per tick, not 100,000.
type batcher struct {
	fwd   Forwarder
	flush time.Duration
	mu    sync.Mutex
	wait  map[uint64][]func(known bool, err error) // by session: the heartbeats waiting
	kick  chan struct{}
}

type touchResult struct {
	known bool
	err   error
}

func newBatcher(fwd Forwarder, flush time.Duration) *batcher {
	return &batcher{fwd: fwd, flush: flush, wait: map[uint64][]func(bool, error){}, kick: make(chan struct{}, 1)}
}

// touch queues a heartbeat of session id and waits for the batch's answer.
func (b *batcher) touch(ctx context.Context, id uint64) (bool, error) {
	ch := make(chan touchResult, 1)
	b.touchAsync(id, func(known bool, err error) { ch <- touchResult{known, err} })
	select {
	case r := <-ch:
		return r.known, r.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// touchAsync queues a heartbeat of session id; done gets the batch's
// answer, on the batcher's goroutine: it must not block.
func (b *batcher) touchAsync(id uint64, done func(known bool, err error)) {
	b.mu.Lock()
	b.wait[id] = append(b.wait[id], done)
	b.mu.Unlock()
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// run forwards a batch one Flush after its first heartbeat, until ctx
// ends; then every heartbeat still waiting fails.
func (b *batcher) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			b.fail(ctx.Err())
			return
		case <-b.kick:
		}
		if !sleep(ctx, b.flush) { // gather what arrives meanwhile
			b.fail(ctx.Err())
			return
		}
		b.mu.Lock()
		wait := b.wait
		b.wait = make(map[uint64][]func(bool, error), len(wait))
		b.mu.Unlock()
		if len(wait) == 0 {
			continue
		}
		ids := make([]uint64, 0, len(wait))
		for id := range wait {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		unknown, moved, err := b.send(ctx, ids)
		for id, dones := range wait {
			known, answer := err == nil, err
			switch {
			case err != nil:
			case has(moved, id):
				// Known, not renewed: its slot moves (groups.md §8.2).
				// Never "ended", which would end the client's session.
				known, answer = false, ErrMoved
			case has(unknown, id):
				known = false
			}
			for _, done := range dones {
				done(known, answer)
			}
		}
	}
}

// has reports whether sorted holds id.
func has(sorted []uint64, id uint64) bool {
	_, ok := slices.BinarySearch(sorted, id)
	return ok
}

// send forwards ids and returns the leader's unknown and moved lists,
// sorted (a batch may hold a whole slot's sessions: 10,000 lookups in
// each list stay cheap).
func (b *batcher) send(ctx context.Context, ids []uint64) (unknown, moved []uint64, err error) {
	ctx, cancel := context.WithTimeout(ctx, touchForwardTimeout)
	defer cancel()
	unknown, moved, err = b.fwd.Touch(ctx, ids)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrNotLeading, err)
	}
	unknown, moved = slices.Clone(unknown), slices.Clone(moved)
	slices.Sort(unknown)
	slices.Sort(moved)
	return unknown, moved, nil
}

func (b *batcher) fail(err error) {
	b.mu.Lock()
	wait := b.wait
	b.wait = map[uint64][]func(bool, error){}
	b.mu.Unlock()
	for _, dones := range wait {
		for _, done := range dones {
			done(false, err)
		}
	}
}

package session

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// forwardTimeout bounds one forwarded batch: a leader that does not answer
// in time renewed nothing, and the heartbeats it carried go unacknowledged.
const forwardTimeout = 2 * time.Second

// batcher gathers the heartbeats a follower receives for one Flush and
// forwards them to the leader in one call, so that 100,000 idle sessions
// cost the leader a few calls per tick, not 100,000.
type batcher struct {
	fwd   Forwarder
	flush time.Duration
	mu    sync.Mutex
	wait  map[uint64][]chan touchResult // by session: the heartbeats waiting
	kick  chan struct{}
}

type touchResult struct {
	known bool
	err   error
}

func newBatcher(fwd Forwarder, flush time.Duration) *batcher {
	return &batcher{fwd: fwd, flush: flush, wait: map[uint64][]chan touchResult{}, kick: make(chan struct{}, 1)}
}

// touch queues a heartbeat of session id and waits for the batch's answer.
func (b *batcher) touch(ctx context.Context, id uint64) (bool, error) {
	ch := make(chan touchResult, 1)
	b.mu.Lock()
	b.wait[id] = append(b.wait[id], ch)
	b.mu.Unlock()
	select {
	case b.kick <- struct{}{}:
	default:
	}
	select {
	case r := <-ch:
		return r.known, r.err
	case <-ctx.Done():
		return false, ctx.Err()
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
		b.wait = map[uint64][]chan touchResult{}
		b.mu.Unlock()
		if len(wait) == 0 {
			continue
		}
		ids := make([]uint64, 0, len(wait))
		for id := range wait {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		unknown, err := b.send(ctx, ids)
		for id, chans := range wait {
			r := touchResult{known: err == nil && !slices.Contains(unknown, id), err: err}
			for _, ch := range chans {
				ch <- r
			}
		}
	}
}

func (b *batcher) send(ctx context.Context, ids []uint64) ([]uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, forwardTimeout)
	defer cancel()
	unknown, err := b.fwd.Touch(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotLeading, err)
	}
	return unknown, nil
}

func (b *batcher) fail(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, chans := range b.wait {
		for _, ch := range chans {
			ch <- touchResult{err: err}
		}
		delete(b.wait, id)
	}
}

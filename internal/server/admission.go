package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/lockcluster/lockcluster/internal/rpcerr"
)

// Attach admission. When a node dies, every session whose stream it
// carried attaches again elsewhere within a second; each attach waits for
// the client's index, checks the secret and reads the session's requests
// under the state machine's lock before its Synced goes out. Unbounded,
// 10,000 of them at once compete for the CPU with raft's own heartbeats
// and appends (issue 21). A node lets a bounded number of attaches work at
// once, queues a bounded number more for a short while, and refuses the
// rest at once with a retryable Unavailable (NOT_READY) before doing any
// work for them, with a RetryInfo delay drawn from 0.25-1 s: the client
// tries again after it, on this node or another. An attached stream leaves the gate once its Synced is
// ready (sending it waits on the client, not on the node: stream.go);
// heartbeats and events are not gated.
const (
	defaultAttachesInFlight = 64
	defaultAttachQueue      = 2048
	attachQueueWait         = 2 * time.Second
)

type attachGate struct {
	slots      chan struct{}
	waiting    atomic.Int64
	maxWaiting int64
	shed       atomic.Uint64 // attaches refused
}

func newAttachGate(inFlight, queue int) *attachGate {
	if inFlight <= 0 {
		inFlight = defaultAttachesInFlight
	}
	if queue < 0 {
		queue = 0
	}
	return &attachGate{slots: make(chan struct{}, inFlight), maxWaiting: int64(queue)}
}

// enter admits one attach, waiting in the queue if it has room; it returns
// the release to call once the attach is done, or a retryable error.
func (g *attachGate) enter(ctx context.Context, node string) (release func(), err error) {
	release = func() { <-g.slots }
	select {
	case g.slots <- struct{}{}:
		return release, nil
	default:
	}
	if g.waiting.Add(1) > g.maxWaiting {
		g.waiting.Add(-1)
		return nil, g.refuse(node)
	}
	defer g.waiting.Add(-1)
	t := time.NewTimer(attachQueueWait)
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
		return release, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, g.refuse(node)
	}
}

// attachRetry is the window a refused attach is told to come back in
// (RetryInfo): a random delay in it spreads the refused clients' return.
const attachRetryMin, attachRetryWindow = 250 * time.Millisecond, 750 * time.Millisecond

func (g *attachGate) refuse(node string) error {
	g.shed.Add(1)
	err := toStatus(fmt.Errorf("%w: node %s has %d session attaches in flight and %d queued; try again shortly", rpcerr.ErrNotReady, node, cap(g.slots), g.maxWaiting))
	return rpcerr.WithRetryDelay(err, attachRetryMin+rand.N(attachRetryWindow))
}

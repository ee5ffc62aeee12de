package raftnode

import (
	"context"
	"sync"
)

// SubscribeLeadership returns a channel that carries this node's leadership
// as a level: true while it is the leader, false otherwise. The current
// level is delivered at once, then every change. A slow consumer never
// blocks raft and never misses the latest level: an unread value is
// replaced by the newer one, so a consumer may see the same value twice in
// a row (true, true means leadership was lost and regained in between:
// re-arm leader-only work). The channel is closed by Shutdown, after a
// final false if the last value sent was true. Call cancel to unsubscribe.
func (n *Node) SubscribeLeadership() (ch <-chan bool, cancel func()) {
	return n.leadership.subscribe()
}

// watchLeadership drains raft's NotifyCh (raft blocks on it) until raft
// stops, publishing each transition, and starts the per-term read barrier
// as soon as this node becomes leader so the first ReadBarrier is fast.
func (n *Node) watchLeadership(notify <-chan bool) {
	defer n.wg.Done()
	for {
		select {
		case leader := <-notify:
			n.logger.Info("leadership changed", "leader", leader, "term", n.raft.CurrentTerm())
			n.leadership.set(leader)
			n.peers.reset()
			if leader {
				n.wg.Add(1)
				go n.primeReadBarrier()
			}
		case <-n.stopped:
			return
		}
	}
}

// primeReadBarrier runs the current term's barrier in the background.
func (n *Node) primeReadBarrier() {
	defer n.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTimeout)
	defer cancel()
	if err := n.ensureTermBarrier(ctx, n.raft.CurrentTerm()); err != nil {
		n.logger.Debug("term barrier after election failed", "error", err)
	}
}

// broadcaster fans a boolean level out to subscribers, one-deep and
// latest-wins per subscriber.
type broadcaster struct {
	mu     sync.Mutex
	level  bool
	subs   map[int]chan bool
	nextID int
	closed bool
}

func newBroadcaster() *broadcaster {
	return &broadcaster{subs: map[int]chan bool{}}
}

func (b *broadcaster) subscribe() (<-chan bool, func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch := make(chan bool, 1)
	if b.closed {
		close(ch)
		return ch, func() {}
	}
	id := b.nextID
	b.nextID++
	b.subs[id] = ch
	ch <- b.level
	return ch, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, ok := b.subs[id]; ok {
			delete(b.subs, id)
			close(ch)
		}
	}
}

func (b *broadcaster) set(level bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.level = level
	for _, ch := range b.subs {
		replace(ch, level)
	}
}

// close sends a final false if needed and closes every subscription.
func (b *broadcaster) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	for id, ch := range b.subs {
		if b.level {
			replace(ch, false)
		}
		close(ch)
		delete(b.subs, id)
	}
	b.level = false
}

// replace puts v in ch (capacity 1), discarding an unread value. Only the
// broadcaster sends, under its lock, so the send cannot block.
func replace(ch chan bool, v bool) {
	select {
	case <-ch:
	default:
	}
	ch <- v
}

package server

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/raftnode"
)

// Heartbeats are not logged: they renew deadlines on the leader only. A
// session stream attached to a follower hands its heartbeats to the
// touchBatcher, which forwards all that arrived within HeartbeatFlush to
// the leader in one Touch call, so 100,000 idle sessions cost the leader a
// few calls per tick, not 100,000.

// errNotLeading: neither this node nor a reachable leader could renew the
// deadline; the heartbeat is not acknowledged and the client tries again
// (and moves to another node after TTL/3 without an ack). A node that
// knows no leader at all ends the stream instead (stream.go).
var errNotLeading = errors.New("no leader could renew the session")

// touch renews session id: on the leader directly, elsewhere through the
// leader. known is false when the session has ended.
func (s *Server) touch(ctx context.Context, id uint64) (known bool, err error) {
	if unknown, ok := s.tracker.Touch(id); ok {
		return len(unknown) == 0, nil
	}
	if node := s.replica(); node != nil && node.IsLeader() {
		// Leading, but the tracker has not re-armed yet (the new leader's
		// read barrier is under way): no answer rather than a wrong one.
		return true, errNotLeading
	}
	return s.touches.touch(ctx, id)
}

// knowsLeader says whether this node knows a leader, itself or another,
// that a heartbeat could renew a session through.
func (s *Server) knowsLeader() bool {
	node := s.replica()
	if node == nil {
		return false
	}
	id, _ := node.Leader()
	return id != ""
}

func (s *Server) notLeader() error {
	node := s.replica()
	if node == nil {
		return raftnode.ErrShutdown
	}
	id, addr := node.Leader()
	if id == s.cfg.Self.ID {
		id, addr = "", ""
	}
	return &raftnode.NotLeaderError{LeaderID: id, LeaderAddr: addr}
}

type touchResult struct {
	known bool
	err   error
}

type touchBatcher struct {
	s     *Server
	flush time.Duration
	mu    sync.Mutex
	wait  map[uint64][]chan touchResult
	kick  chan struct{}
}

func newTouchBatcher(s *Server, flush time.Duration) *touchBatcher {
	return &touchBatcher{s: s, flush: flush, wait: map[uint64][]chan touchResult{}, kick: make(chan struct{}, 1)}
}

func (b *touchBatcher) touch(ctx context.Context, id uint64) (bool, error) {
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

func (b *touchBatcher) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			b.fail(ctx.Err())
			return
		case <-b.kick:
		}
		select { // gather what arrives meanwhile
		case <-ctx.Done():
			b.fail(ctx.Err())
			return
		case <-time.After(b.flush):
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
		unknown, err := b.send(ctx, ids)
		for id, chans := range wait {
			r := touchResult{known: !slices.Contains(unknown, id), err: err}
			for _, ch := range chans {
				ch <- r
			}
		}
	}
}

func (b *touchBatcher) send(ctx context.Context, ids []uint64) ([]uint64, error) {
	cc, err := b.s.leaderConn(ctx, b.s.notLeader())
	if err != nil {
		return nil, errNotLeading
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := pb.NewClusterClient(cc).Touch(b.s.forwardContext(ctx), &pb.TouchRequest{SessionIds: ids})
	if err != nil {
		return nil, errNotLeading
	}
	return resp.Unknown, nil
}

func (b *touchBatcher) fail(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, chans := range b.wait {
		for _, ch := range chans {
			ch <- touchResult{err: err}
		}
		delete(b.wait, id)
	}
}

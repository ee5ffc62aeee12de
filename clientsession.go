package lockcluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// clientSession is the client's side of a cluster session: its requests, the
// event stream that resolves them, heartbeats, and jeopardy.
type clientSession struct {
	c        *Client
	id       uint64
	clientID string
	secret   []byte // the session's secret: every write and the stream present it
	ttl      time.Duration
	ctx      context.Context // ends with the session
	cancel   context.CancelCauseFunc
	// jeopardyErr is the cause of a jeopardy end.
	jeopardyErr error

	mu        sync.Mutex
	nextID    uint64
	reqs      map[uint64]*request // outstanding: pending, held, or abandoned
	lastSeq   uint64              // the last event seq applied
	lastAcked time.Time           // send time of the last acknowledged heartbeat
	// deadline is the jeopardy deadline, lastAcked + ttl, as monotonic
	// nanoseconds since monoBase: read without s.mu by every look at a
	// lock's context, which may come while s.mu is held. How it relates to
	// the leader's expiry: session/DESIGN.md, "The timeline".
	deadline  atomic.Int64
	hbSent    map[uint64]time.Time
	hbNext    uint64
	connected bool
}

// session returns the client's live session, opening one if there is none
// (at Dial, or after the last one was lost).
func (c *Client) session(ctx context.Context) (*clientSession, error) {
	if s, err := c.live(); err != nil || s != nil && !s.checkJeopardy() {
		return s, err
	}
	c.openMu.Lock() // one caller opens; the others wait for its session
	defer c.openMu.Unlock()
	if s, err := c.live(); err != nil || s != nil && !s.checkJeopardy() {
		return s, err
	}
	sent := time.Now()
	var resp *pb.OpenSessionResponse
	err := c.call(ctx, func(ctx context.Context, lc pb.LocksClient) error {
		var err error
		resp, err = lc.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: c.cfg.namespace, Label: c.cfg.label, Ttl: durationpb.New(c.cfg.ttl)})
		return err
	})
	if err != nil {
		return nil, err
	}
	s := &clientSession{c: c, id: resp.SessionId, clientID: resp.ClientId, secret: resp.Secret, ttl: resp.Ttl.AsDuration(), nextID: 1,
		reqs: map[uint64]*request{}, lastAcked: sent, hbSent: map[uint64]time.Time{}}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	s.jeopardyErr = fmt.Errorf("%w: no heartbeat acknowledged for a whole TTL (%s)", ErrSessionLost, s.ttl)
	s.setDeadline(sent)
	c.mu.Lock()
	if resp.Index > c.maxIndex {
		c.maxIndex = resp.Index
	}
	closed := c.closed
	if !closed {
		c.sess = s
	}
	c.mu.Unlock()
	if closed {
		go c.closeQuietly(s.id, s.secret)
		return nil, fmt.Errorf("%w: the client is closed", ErrSessionClosed)
	}
	go s.run()
	go s.watch()
	return s, nil
}

// live returns the current session if it has not ended.
func (c *Client) live() (*clientSession, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("%w: the client is closed", ErrSessionClosed)
	}
	if c.sess != nil && c.sess.ctx.Err() == nil {
		return c.sess, nil
	}
	return nil, nil
}

func (c *Client) closeQuietly(id uint64, secret []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = c.call(ctx, func(ctx context.Context, lc pb.LocksClient) error {
		_, err := lc.CloseSession(ctx, &pb.CloseSessionRequest{Namespace: c.cfg.namespace, SessionId: id, SessionSecret: secret})
		return err
	})
}

// end ends the session here: every pending request fails and every held
// lock's context is cancelled with cause. It reports whether it ended it
// (false: it had ended already).
func (s *clientSession) end(cause error) bool {
	s.mu.Lock()
	if s.ctx.Err() != nil {
		s.mu.Unlock()
		return false
	}
	s.cancel(cause)
	for _, r := range s.reqs {
		r.finish(outcome{lost: cause})
	}
	s.reqs = map[uint64]*request{}
	s.mu.Unlock()
	s.c.mu.Lock()
	if s.c.sess == s {
		s.c.sess = nil
	}
	s.c.mu.Unlock()
	return true
}

// monoBase is the origin of the sessions' deadlines: only its monotonic
// clock reading is used.
var monoBase = time.Now()

// setDeadline sets the jeopardy deadline from the send time of the last
// acknowledged heartbeat (session/DESIGN.md, "The timeline"), and tells
// WithDeadlineFunc's f. Called with s.mu held, or before s is shared: the
// calls of f come in order.
func (s *clientSession) setDeadline(acked time.Time) {
	d := acked.Add(s.ttl).Sub(monoBase)
	s.deadline.Store(int64(d))
	if f := s.c.cfg.deadlineFunc; f != nil {
		f(monoBase.Add(d))
	}
}

// JeopardyDeadline is the current session's jeopardy deadline: the send
// time of its last acknowledged heartbeat plus its TTL. Unless a later
// heartbeat is acknowledged first, the client gives up every lock of the
// session at that instant (their contexts end), and the cluster cannot
// expire the session, let alone grant its locks to anyone else, before it
// (session/DESIGN.md, "The timeline"). Whatever must stop before another
// holder can start (a job the lock protects) must stop by then.
//
// The time carries a monotonic clock reading: measure it with time.Until,
// not against the wall clock. It is the zero Time when the client has no
// live session (closed, or the last one lost and no new one opened yet).
func (c *Client) JeopardyDeadline() time.Time {
	s, _ := c.live()
	if s == nil {
		return time.Time{}
	}
	return monoBase.Add(time.Duration(s.deadline.Load()))
}

// WithDeadlineFunc has f called with the new jeopardy deadline (see
// Client.JeopardyDeadline) each time it moves: when a session opens, and
// at every acknowledged heartbeat that moves it forward. Calls come one at
// a time, in order, from the client's own goroutines (the first from
// Dial's), while the session's state is locked: f must return at once and
// must not call the Client. Within a session each deadline is later than
// the one before; a new session (after a loss) starts its own.
//
// A process that hands the deadline to another one (a watchdog that must
// act even when this process is stopped) should convert it on its side of
// the hand-off: the other process cannot read this one's monotonic clock
// reading.
func WithDeadlineFunc(f func(deadline time.Time)) Option {
	return func(c *config) { c.deadlineFunc = f }
}

// overdue says whether the session's jeopardy deadline has passed (the
// session may have ended meanwhile, or be ending). It takes no lock.
func (s *clientSession) overdue() bool {
	if s.ttl <= 0 { // a session of a unit test, without heartbeats
		return false
	}
	return int64(time.Since(monoBase)) >= s.deadline.Load()
}

// checkJeopardy ends the session if its jeopardy deadline has passed, at
// once, on the caller's goroutine (the watch timer may not have run yet:
// the process may have just resumed from a pause). It reports whether the
// session has ended. It takes s.mu: never call it with s.mu held.
func (s *clientSession) checkJeopardy() bool {
	if s.overdue() {
		s.jeopardy() // waits for an end under way elsewhere to finish
		return true
	}
	return s.ctx.Err() != nil
}

// jeopardy ends the session because no heartbeat was acknowledged for a
// whole TTL, and closes it on the cluster if it can still be reached.
func (s *clientSession) jeopardy() {
	if s.end(s.jeopardyErr) {
		go s.c.closeQuietly(s.id, s.secret)
	}
}

// watch ends the session when a whole TTL has passed since the send time of
// the last acknowledged heartbeat (jeopardy, SPEC §4). The timer is set for
// the exact moment, not polled: why that gives the locks up before the
// leader can expire the session is session/DESIGN.md, "The timeline"
// (docs/chaos.md, finding 1).
func (s *clientSession) watch() {
	timer := time.NewTimer(s.ttl)
	defer timer.Stop()
	for {
		s.mu.Lock()
		left := time.Until(s.lastAcked.Add(s.ttl))
		s.mu.Unlock()
		if left > 0 {
			timer.Reset(left)
			select {
			case <-s.ctx.Done():
				return
			case <-timer.C:
			}
			continue
		}
		s.jeopardy()
		return
	}
}

// run keeps a session stream open, to one endpoint after another, for as
// long as the session lives.
func (s *clientSession) run() {
	const minBackoff = 20 * time.Millisecond
	backoff := minBackoff
	for s.ctx.Err() == nil {
		cc, i := s.c.conn()
		s.mu.Lock()
		acked := s.lastAcked
		s.mu.Unlock()
		err := s.stream(pb.NewLocksClient(cc), i)
		if s.ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		if s.lastAcked.After(acked) {
			// The stream renewed the session: the next failure is news,
			// not the same outage (streams now end whenever their node
			// cannot renew the session, so every election ends some).
			backoff = minBackoff
		}
		s.mu.Unlock()
		if st, ok := status.FromError(err); ok && st.Code() == codes.FailedPrecondition {
			s.end(fmt.Errorf("%w: %s", ErrSessionLost, st.Message()))
			return
		}
		wait := s.reattachAfter(err, backoff)
		if slotMoving(err) {
			// The namespace's slot moves to another group: the node is
			// fine and parks the attach until the slot lands. Come back to
			// it soon, spread a little (a slot's sessions all end at once).
			wait = rand.N(movingSpread + 1)
		} else {
			s.c.rotate(i)
			backoff = min(2*backoff, 500*time.Millisecond)
		}
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// movingSpread spreads the re-attaches of a moving slot's sessions: the
// node they come back to parks each attach until the slot serves again
// (typically tens of milliseconds), so they need no TTL/20.
const movingSpread = 20 * time.Millisecond

// reattachAfter is how long to wait after a stream ended with err: the
// jittered backoff, or the delay the node asked for (RetryInfo) if longer,
// but never more than TTL/6, well inside the TTL/3 a session may go
// without an acknowledged heartbeat.
func (s *clientSession) reattachAfter(err error, backoff time.Duration) time.Duration {
	d := reattachDelay(backoff, s.ttl)
	if asked, ok := retryDelay(err); ok && asked > d {
		d = asked
		if s.ttl > 0 {
			d = min(d, s.ttl/6)
		}
	}
	return d
}

// reattachDelay is how long a session waits before it attaches its stream
// again: the backoff, at least half of it, randomised (full jitter on the
// upper half), and never less than a random share of TTL/20. When a node
// fails, every session whose stream it carried reattaches at once; 10,000
// of them within a few milliseconds made a storm that starved raft on the
// node they moved to (issue 21). Spread over TTL/20 (500 ms at the default
// 10 s TTL) they cost the same in all and leave room for raft's
// heartbeats; TTL/20 is small next to the TTL/3 a session may go without
// an acknowledged heartbeat before it moves anyway.
func reattachDelay(backoff, ttl time.Duration) time.Duration {
	d := backoff/2 + rand.N(backoff/2+1)
	if spread := ttl / 20; spread > 0 {
		d = max(d, rand.N(spread))
	}
	return d
}

// stream runs one session stream, on endpoint i, until it fails.
func (s *clientSession) stream(lc pb.LocksClient, i int) (err error) {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	st, err := lc.Session(ctx)
	if err != nil {
		return err
	}
	s.c.mu.Lock()
	minIndex := s.c.maxIndex
	s.c.mu.Unlock()
	if err := st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Attach{Attach: &pb.Attach{Namespace: s.c.cfg.namespace, SessionId: s.id, MinIndex: minIndex,
		SessionSecret: s.secret, ChunkedSync: true}}}); err != nil {
		return err
	}
	synced, err := recvSync(st)
	if err != nil {
		return err
	}
	s.sync(synced)
	calls := newCaller(st, s.id, i)
	defer func() { calls.end(err) }()
	if synced.Calls {
		s.c.caller.Store(calls)
		defer s.c.caller.CompareAndSwap(calls, nil)
	}
	sendErr := make(chan error, 1)
	go func() {
		sendErr <- s.heartbeat(ctx, calls)
		cancel() // wake the Recv below
	}()
	for {
		m, err := st.Recv()
		if err != nil {
			select {
			case herr := <-sendErr:
				if errors.Is(herr, errNotRenewed) {
					return herr
				}
			default:
			}
			return err
		}
		switch k := m.Kind.(type) {
		case *pb.SessionDown_HeartbeatAck:
			s.acked(k.HeartbeatAck.Id)
		case *pb.SessionDown_Event:
			s.event(k.Event)
		case *pb.SessionDown_Reply:
			calls.deliver(k.Reply)
		}
		select {
		case err := <-sendErr:
			return err
		default:
		}
	}
}

// recvSync receives the sync a session stream starts with: one Synced, or
// its pieces (the attach says the client assembles them, so that a sync
// larger than a gRPC message gets through), put together. Nothing of it is
// acted on before the last piece: a stream that ends part-way has synced
// nothing.
func recvSync(st pb.Locks_SessionClient) (*pb.Synced, error) {
	var whole *pb.Synced
	for {
		m, err := st.Recv()
		if err != nil {
			return nil, err
		}
		piece := m.GetSynced()
		switch {
		case piece == nil && whole == nil:
			return nil, errors.New("session stream did not start with a sync")
		case piece == nil:
			return nil, errors.New("session stream: a sync's pieces were interrupted by another message")
		case whole == nil:
			whole = piece
		case piece.Index != whole.Index || piece.EventSeq != whole.EventSeq:
			return nil, fmt.Errorf("session stream: the pieces of a sync disagree (index %d, event seq %d, then index %d, event seq %d)",
				whole.Index, whole.EventSeq, piece.Index, piece.EventSeq)
		default:
			whole.Requests = append(whole.Requests, piece.Requests...)
		}
		if !piece.More {
			whole.More = false
			return whole, nil
		}
	}
}

// errNotRenewed: the stream's node acknowledged no heartbeat for TTL/3.
var errNotRenewed = errors.New("no heartbeat acknowledged on this stream for a third of the TTL: moving to another endpoint")

// heartbeat sends a heartbeat every TTL/3, at once first. A heartbeat
// still unacknowledged after TTL/10 is sent again: a node drops the
// heartbeats that arrive while no leader can renew the session (an
// election), and waiting a whole TTL/3 for the next one let three
// unlucky heartbeats in a row, around leader failures a few seconds
// apart, cost the session (jeopardy after one TTL without an ack).
//
// When a heartbeat of this stream has gone unacknowledged for TTL/3 it
// returns errNotRenewed: the node cannot renew the session (it is cut off
// from the leader, or paused), and the stream moves to another endpoint
// with two thirds of the TTL left, instead of staying until jeopardy
// (docs/chaos.md, finding 2).
func (s *clientSession) heartbeat(ctx context.Context, k *caller) error {
	every, retry := max(s.ttl/3, 10*time.Millisecond), max(s.ttl/10, 5*time.Millisecond)
	tick := time.NewTicker(retry)
	defer tick.Stop()
	var last time.Time
	var lastID uint64
	var sent []uint64 // this stream's heartbeats not yet known acknowledged, oldest first
	var sentAt []time.Time
	for {
		s.mu.Lock()
		for len(sent) > 0 { // an ack of id acknowledges every id below it
			if _, ok := s.hbSent[sent[0]]; ok {
				break
			}
			sent, sentAt = sent[1:], sentAt[1:]
		}
		if len(sent) > 0 && time.Since(sentAt[0]) >= every {
			s.mu.Unlock()
			return errNotRenewed
		}
		_, unacked := s.hbSent[lastID]
		due := last.IsZero() || time.Since(last) >= every || unacked && time.Since(last) >= retry
		var id uint64
		if due {
			s.hbNext++
			id = s.hbNext
			s.hbSent[id] = time.Now()
			sent, sentAt = append(sent, id), append(sentAt, s.hbSent[id])
		}
		s.mu.Unlock()
		if due {
			if err := k.send(&pb.SessionUp{Kind: &pb.SessionUp_Heartbeat{Heartbeat: &pb.Heartbeat{Id: id}}}); err != nil {
				return err
			}
			last, lastID = time.Now(), id
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func (s *clientSession) acked(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sent, ok := s.hbSent[id]; ok {
		if sent.After(s.lastAcked) {
			s.lastAcked = sent
			s.setDeadline(sent)
		}
		for k := range s.hbSent {
			if k <= id {
				delete(s.hbSent, k)
			}
		}
	}
}

package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// ErrNotLeading: neither this node nor a leader it could reach renewed the
// session. A heartbeat that gets it is not acknowledged.
var ErrNotLeading = errors.New("no leader could renew the session")

// ErrMoved: the leader knows the session but did not renew it, because
// its slot is moving, or moved, to another group (groups.md §8.2 rule
// 1): the group does not serve it any more. A heartbeat that gets it is
// not acknowledged, and the session is not ended either: its stream ends
// MOVING, and the client re-attaches to the group that serves it.
var ErrMoved = errors.New("the session's slot is moving to another group: not renewed here")

// Expirer proposes an ExpireSession entry and returns once it is applied.
type Expirer interface {
	Expire(ctx context.Context, session uint64) error
}

// Log is this node's copy of the replicated log, as a new leader's re-arm
// and its acknowledgements need it: a read barrier, a confirmation of its
// leadership, and the sessions the applied state holds.
type Log interface {
	// Barrier returns nil once this node, confirmed leader after the call
	// started, has applied every entry committed before it.
	Barrier(ctx context.Context) error
	// Confirm returns nil once a quorum has confirmed, after the call
	// started, that this node leads in the term it led when the call
	// started (a raft VerifyLeader round); an error otherwise.
	Confirm(ctx context.Context) error
	// Sessions lists the sessions open in the applied state.
	Sessions() []Info
}

// Forwarder carries a follower's heartbeats to the leader.
type Forwarder interface {
	// Touch asks the leader to renew the sessions ids and returns those it
	// does not know (ended), and those it knows but did not renew because
	// their slot is moving to another group (ErrMoved): neither list
	// holds an id of the other. An error means none was renewed.
	Touch(ctx context.Context, ids []uint64) (unknown, moved []uint64, err error)
}

// Info is a session as the applied state has it: its id and TTL (the
// client's; Liveness adds the grace).
type Info struct {
	ID  uint64
	TTL time.Duration
}

// Config configures a Liveness.
type Config struct {
	Expirer   Expirer
	Log       Log
	Forwarder Forwarder
	// Served, when set, says whether the applied state has session id open
	// in a slot this group serves, and its TTL. The leader's table learns
	// of a session that a move imported (Opened) from the server, after
	// the state machine applied the Import; a renewal that arrives in
	// between finds the table without it, and would answer it ended.
	// With Served the table arms such a session instead (a full TTL from
	// now, as any renewal), and only a session the state does not hold is
	// unknown.
	Served func(id uint64) (ttl time.Duration, ok bool)
	// Tick is the resolution of deadlines (default 50ms): a session expires
	// between its deadline and one tick later.
	Tick time.Duration
	// Flush is how long a follower gathers heartbeats before it forwards
	// them in one call, and the least time between two confirmations of
	// leadership on the leader (default 20ms).
	Flush  time.Duration
	Logger hclog.Logger
	// Now is the clock the deadlines are read on (default time.Now); tests
	// replace it. Timers run on the runtime's clock.
	Now func() time.Time
}

// The re-arm's read barrier: each attempt is bounded, and a failed one is
// retried after a pause, for as long as the term lasts.
const (
	barrierTimeout = 5 * time.Second
	barrierRetry   = 100 * time.Millisecond
)

// Liveness keeps sessions alive on this node: the leader's deadlines, the
// re-arm after a change of leader and the heartbeat path (DESIGN.md).
type Liveness struct {
	cfg   Config
	t     *deadlines
	batch *batcher
	conf  *confirmer
}

// New returns a Liveness that is following. Call Run to drive it.
func New(cfg Config) *Liveness {
	cfg = cfg.withDefaults()
	return &Liveness{cfg: cfg, t: newDeadlines(cfg), batch: newBatcher(cfg.Forwarder, cfg.Flush),
		conf: newConfirmer(cfg.Log, cfg.Flush)}
}

func (cfg Config) withDefaults() Config {
	if cfg.Tick <= 0 {
		cfg.Tick = 50 * time.Millisecond
	}
	if cfg.Flush <= 0 {
		cfg.Flush = 20 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg
}

// Run fires deadlines, forwards heartbeats and confirms leadership until
// ctx ends; then it follows, and heartbeats waiting to be forwarded or
// confirmed fail.
func (l *Liveness) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); l.t.Run(ctx) }()
	go func() { defer wg.Done(); l.batch.run(ctx) }()
	go func() { defer wg.Done(); l.conf.run(ctx) }()
	wg.Wait()
}

// Lead is called when this node gains leadership, with a context that ends
// with the term. It runs the read barrier until it succeeds, then re-arms
// every session of the applied state with a full Expiry(TTL) from now, and
// returns nil. Until then this node renews nothing and expires nothing. It
// returns an error, and arms nothing, if the term ends first (ctx, or a
// Follow).
func (l *Liveness) Lead(ctx context.Context) error {
	epoch := l.t.begin()
	// The caller ends ctx before it calls Follow, so begin may have come
	// after the Follow that ended this term: then ctx tells, and the term
	// is given up at once rather than left re-arming.
	err := ctx.Err()
	if err == nil {
		err = l.rearm(ctx, epoch)
	}
	if err != nil {
		l.t.abandon(epoch)
	}
	return err
}

func (l *Liveness) rearm(ctx context.Context, epoch uint64) error {
	for {
		bctx, cancel := context.WithTimeout(ctx, barrierTimeout)
		err := l.cfg.Log.Barrier(bctx)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		l.cfg.Logger.Warn("new leader: read barrier failed; retrying", "error", err)
		if !sleep(ctx, barrierRetry) {
			return ctx.Err()
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	infos := l.cfg.Log.Sessions()
	for i := range infos {
		infos[i].TTL = Expiry(infos[i].TTL)
	}
	if !l.t.arm(epoch, infos) {
		return errors.New("the term ended before the sessions were re-armed")
	}
	return nil
}

// Follow is called on every change of leadership: every deadline is
// dropped, pending expiries stop, and a Lead under way arms nothing.
func (l *Liveness) Follow() { l.t.Follow() }

// Opened arms a session that an applied OpenSession opened, with a full
// Expiry(ttl) (on the leader; ignored on a follower).
func (l *Liveness) Opened(id uint64, ttl time.Duration) { l.t.Opened(id, Expiry(ttl)) }

// Ended forgets a session that an applied entry closed or expired.
func (l *Liveness) Ended(id uint64) { l.t.Ended(id) }

// Heartbeat renews session id for a heartbeat received here: on the leader
// at once, and answered once a confirmation of leadership that started
// after the renewal has succeeded; elsewhere through the leader (batched,
// see DESIGN.md). known is false when the session has ended. err is
// ErrNotLeading when no leader renewed it (among them a leader that has
// not re-armed yet, or whose leadership was not confirmed: no answer
// rather than a wrong one), ErrMoved when the leader refused it because
// the session's slot is moving (a follower's batch only: the leader's own
// streams ask the state machine themselves), or the error of ctx.
func (l *Liveness) Heartbeat(ctx context.Context, id uint64) (known bool, err error) {
	type answer struct {
		known bool
		err   error
	}
	ch := make(chan answer, 1)
	l.HeartbeatAsync(id, func(known bool, err error) { ch <- answer{known, err} })
	select {
	case a := <-ch:
		return a.known, a.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// HeartbeatAsync is Heartbeat without a goroutine waiting: it renews
// session id at once (on the leader) or queues it for the follower's
// batch, and calls done with Heartbeat's answer once there is one: after
// the confirmation of leadership that started after the renewal, or the
// leader's answer to the batch. done runs on the goroutine that confirms
// or forwards, so it must not block; it may run before HeartbeatAsync
// returns. A session stream (internal/server) acknowledges a heartbeat from
// done, so one goroutine per stream fewer waits, and no goroutine wakes up
// per heartbeat only to pass an answer on. The rule is Heartbeat's: a
// renewal is answered "known" only once confirmed in the term it was made
// in (DESIGN.md, "A change of leader").
func (l *Liveness) HeartbeatAsync(id uint64, done func(known bool, err error)) {
	unknown, epoch, st := l.t.touch(id)
	if st == leading {
		unknown = l.adopt(unknown)
	}
	switch st {
	case leading:
		l.conf.waitAsync(func(err error) {
			if err == nil && !l.t.holds(epoch) {
				err = errTermChanged
			}
			if err != nil {
				done(false, err)
				return
			}
			done(len(unknown) == 0, nil)
		})
	case arming:
		done(true, ErrNotLeading)
	default:
		l.batch.touchAsync(id, done)
	}
}

// Renew is the leader's end of a forwarded batch: it renews the sessions
// ids and, once a confirmation of leadership that started after the
// renewal has succeeded, returns those it does not know. It returns
// ErrNotLeading when this node does not hold the deadlines (a follower, or
// a leader still re-arming) or its leadership was not confirmed within the
// follower's own bound on the call, or before ctx (the forwarded call's)
// ended: a follower that gave up on the call is not waited for.
func (l *Liveness) Renew(ctx context.Context, ids ...uint64) (unknown []uint64, err error) {
	unknown, epoch, st := l.t.touch(ids...)
	if st != leading {
		return nil, ErrNotLeading
	}
	unknown = l.adopt(unknown)
	ctx, cancel := context.WithTimeout(ctx, touchForwardTimeout)
	defer cancel()
	if err := l.confirmed(ctx, epoch); err != nil {
		if !errors.Is(err, ErrNotLeading) {
			err = fmt.Errorf("%w: %v", ErrNotLeading, err)
		}
		return nil, err
	}
	return unknown, nil
}

// adopt arms the sessions of unknown that the applied state holds and
// serves (Config.Served: a move's Import applied, its Opened not yet),
// and returns the rest: those the state does not hold, which have ended.
func (l *Liveness) adopt(unknown []uint64) []uint64 {
	if len(unknown) == 0 || l.cfg.Served == nil {
		return unknown
	}
	out := unknown[:0]
	for _, id := range unknown {
		if ttl, ok := l.cfg.Served(id); ok {
			l.t.Opened(id, Expiry(ttl))
			continue
		}
		out = append(out, id)
	}
	return out
}

// confirmed waits for a confirmation of leadership that started after a
// renewal made in the term of epoch, and checks that the term has not
// ended meanwhile: a renewal is acknowledged only if this node was leader,
// in the term it renewed in, at some instant after the renewal
// (DESIGN.md, "A change of leader").
func (l *Liveness) confirmed(ctx context.Context, epoch uint64) error {
	if err := l.conf.wait(ctx); err != nil {
		return err
	}
	if !l.t.holds(epoch) {
		return errTermChanged
	}
	return nil
}

var errTermChanged = fmt.Errorf("%w: leadership changed before the renewal was confirmed", ErrNotLeading)

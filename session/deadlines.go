package session

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// deadlines is the leader's table of session deadlines: one per session,
// renewed by every heartbeat, fired by Run. Liveness owns it; it knows
// nothing of barriers, grace or forwarding (the durations it is given are
// already Expiry(TTL)).
type deadlines struct {
	cfg Config
	// proposing bounds the expiries proposed at once (maxExpiring).
	proposing chan struct{}
	// base is the origin of the wheel's slots. Slots count ticks since
	// base by Sub, which reads the monotonic clock when both times have a
	// reading (time.Now): a step of the wall clock moves no deadline.
	base time.Time

	mu    sync.Mutex
	state termState
	epoch uint64 // bumped on every leadership change: stale arms and expiries stop
	// leads is epoch+1 while leading, 0 otherwise, written under mu: holds
	// reads it without the lock, which every heartbeat's acknowledgement
	// on the leader asks for (one lock per heartbeat fewer on a table that
	// 30,000 heartbeats a second renew).
	leads atomic.Uint64
	ttl   map[uint64]time.Duration
	due   map[uint64]time.Time
	// wheel holds, per tick slot, the sessions whose deadline fell in it
	// when it was last set; entries are checked against due when the slot
	// fires, so a heartbeat only appends and never searches.
	wheel    map[int64][]uint64
	lastSlot int64
	expiring map[uint64]bool
	// While arming: the sessions applied entries opened and ended since
	// the term began, which the snapshot read after the barrier may miss.
	openedEarly map[uint64]time.Duration
	endedEarly  map[uint64]bool
	// termCtx lives as long as the current term of leadership: the
	// expiries proposed in it stop with it.
	termCtx context.Context
	stop    context.CancelFunc
}

// termState is where this node stands in the current term.
type termState int

const (
	following termState = iota // expires nothing, renews nothing
	arming                     // leads, but has not re-armed yet (barrier)
	leading                    // holds every session's deadline
)

// newDeadlines returns a table that is following. cfg has its defaults.
func newDeadlines(cfg Config) *deadlines {
	return &deadlines{cfg: cfg, proposing: make(chan struct{}, maxExpiring), base: cfg.Now(), ttl: map[uint64]time.Duration{}, due: map[uint64]time.Time{}, wheel: map[int64][]uint64{},
		expiring: map[uint64]bool{}, openedEarly: map[uint64]time.Duration{}, endedEarly: map[uint64]bool{}}
}

// begin starts a term of leadership: nothing is armed until arm is called
// with the epoch it returns.
func (t *deadlines) begin() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.resetLocked()
	t.state = arming
	return t.epoch
}

// arm re-arms every session with its full duration from now, and those
// opened since begin, unless they ended meanwhile. It reports false, and
// arms nothing, when the term of epoch has ended.
func (t *deadlines) arm(epoch uint64, sessions []Info) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state != arming || t.epoch != epoch {
		return false
	}
	t.state = leading
	t.leads.Store(t.epoch + 1)
	t.termCtx, t.stop = context.WithCancel(context.Background())
	now := t.cfg.Now()
	t.lastSlot = t.reached(now)
	for _, s := range sessions {
		if !t.endedEarly[s.ID] {
			t.armLocked(s.ID, s.TTL, now)
		}
	}
	for id, ttl := range t.openedEarly {
		if !t.endedEarly[id] {
			t.armLocked(id, ttl, now)
		}
	}
	clear(t.openedEarly)
	clear(t.endedEarly)
	t.cfg.Logger.Info("leading: re-armed sessions with a full TTL and grace", "sessions", len(t.ttl))
	return true
}

// abandon gives up the term of epoch if it is still arming: the table
// follows again.
func (t *deadlines) abandon(epoch uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state == arming && t.epoch == epoch {
		t.resetLocked()
	}
}

// Follow stops leading: every timer stops and pending expiries give up.
func (t *deadlines) Follow() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state != following {
		t.cfg.Logger.Info("no longer leading: session timers stopped")
	}
	t.resetLocked()
}

func (t *deadlines) resetLocked() {
	if t.stop != nil {
		t.stop()
		t.termCtx, t.stop = nil, nil
	}
	t.state = following
	t.epoch++
	t.leads.Store(0)
	clear(t.ttl)
	clear(t.due)
	clear(t.wheel)
	clear(t.expiring)
	clear(t.openedEarly)
	clear(t.endedEarly)
}

// current reports where the table stands.
func (t *deadlines) current() termState {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.state
}

// Opened arms a session just opened (ignored when following).
func (t *deadlines) Opened(id uint64, ttl time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch t.state {
	case leading:
		t.armLocked(id, ttl, t.cfg.Now())
	case arming:
		t.openedEarly[id] = ttl
	}
}

// Ended forgets a session that was closed or expired.
func (t *deadlines) Ended(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.ttl, id)
	delete(t.due, id)
	delete(t.expiring, id)
	if t.state == arming {
		t.endedEarly[id] = true
	}
}

// Touch renews the deadlines of sessions: each gets its full duration from
// now. When leading it returns the ids it does not know (ended sessions);
// otherwise it renews nothing and says where the table stands.
func (t *deadlines) Touch(ids ...uint64) (unknown []uint64, st termState) {
	unknown, _, st = t.touch(ids...)
	return unknown, st
}

// touch is Touch, and also names the term the renewal was made in (see
// holds).
func (t *deadlines) touch(ids ...uint64) (unknown []uint64, epoch uint64, st termState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state != leading {
		return nil, t.epoch, t.state
	}
	now := t.cfg.Now()
	for _, id := range ids {
		ttl, known := t.ttl[id]
		if !known {
			unknown = append(unknown, id)
			continue
		}
		if t.expiring[id] {
			// Too late: the expiry is proposed. Its outcome decides.
			continue
		}
		t.armLocked(id, ttl, now)
	}
	return unknown, t.epoch, leading
}

// holds reports whether the table still leads in the term of epoch: no
// change of leadership has reached it since.
func (t *deadlines) holds(epoch uint64) bool {
	return t.leads.Load() == epoch+1
}

// slot is the wheel slot of a deadline: the first tick boundary at or after
// it. A slot fires once the clock has reached its boundary (see Due), so a
// deadline never fires early.
func (t *deadlines) slot(at time.Time) int64 {
	return (int64(at.Sub(t.base)) + int64(t.cfg.Tick) - 1) / int64(t.cfg.Tick)
}

// reached is the last slot whose boundary the clock has reached at now.
func (t *deadlines) reached(now time.Time) int64 {
	return int64(now.Sub(t.base)) / int64(t.cfg.Tick)
}

func (t *deadlines) armLocked(id uint64, ttl time.Duration, now time.Time) {
	d := now.Add(ttl)
	t.ttl[id] = ttl
	t.due[id] = d
	s := t.slot(d)
	t.wheel[s] = append(t.wheel[s], id)
}

// Due returns the sessions whose deadline has passed at now and marks them
// as expiring. Run calls it every tick.
func (t *deadlines) Due(now time.Time) []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state != leading {
		return nil
	}
	var out []uint64
	cur := t.reached(now)
	if cur-t.lastSlot > int64(len(t.wheel))+1 {
		// A long gap: visit the slots that exist rather than every slot.
		for s := range t.wheel {
			if s <= cur {
				out = t.fireLocked(s, now, out)
			}
		}
	} else {
		for s := t.lastSlot + 1; s <= cur; s++ {
			out = t.fireLocked(s, now, out)
		}
	}
	t.lastSlot = cur
	return out
}

func (t *deadlines) fireLocked(s int64, now time.Time, out []uint64) []uint64 {
	for _, id := range t.wheel[s] {
		d, ok := t.due[id]
		if !ok || t.expiring[id] || d.After(now) {
			// Ended, already expiring, or renewed: a renewal put the id in
			// the slot of its new deadline, later than this one (this slot's
			// boundary has passed, so the old deadline had too).
			continue
		}
		t.expiring[id] = true
		out = append(out, id)
	}
	delete(t.wheel, s)
	return out
}

// Run fires deadlines every tick until ctx ends, proposing an expiry for
// each session whose deadline passed. When ctx ends the table follows.
func (t *deadlines) Run(ctx context.Context) {
	tick := time.NewTicker(t.cfg.Tick)
	defer tick.Stop()
	defer t.Follow()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		due := t.Due(t.cfg.Now())
		if len(due) == 0 {
			continue
		}
		t.mu.Lock()
		epoch, termCtx := t.epoch, t.termCtx
		t.mu.Unlock()
		if termCtx == nil {
			continue
		}
		for _, id := range due {
			go t.expire(termCtx, epoch, id)
		}
	}
}

// maxExpiring is how many expiries are proposed at once. When thousands of
// sessions expire together (a machine so starved that their heartbeats
// stopped), one proposal each at once only adds contention: raft commits
// them in batches anyway, and an expiry that waits its turn is never
// unsafe (expiring later only widens session/DESIGN.md's margin).
const maxExpiring = 256

// expire proposes the expiry of one session until it is applied, the
// session ends otherwise, or this term of leadership ends. A failed
// attempt is logged as a warning the first time, then at debug level.
func (t *deadlines) expire(ctx context.Context, epoch, id uint64) {
	backoff := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		select {
		case t.proposing <- struct{}{}:
		case <-ctx.Done():
			return
		}
		t.mu.Lock()
		current := t.state == leading && t.epoch == epoch && t.expiring[id]
		t.mu.Unlock()
		if !current {
			<-t.proposing
			return
		}
		if attempt == 0 {
			t.cfg.Logger.Info("session deadline passed: expiring it", "session", id)
		}
		err := t.cfg.Expirer.Expire(ctx, id)
		<-t.proposing
		if err == nil {
			t.Ended(id)
			return
		}
		if attempt == 0 {
			t.cfg.Logger.Warn("proposing session expiry failed; retrying", "session", id, "error", err)
		} else {
			t.cfg.Logger.Debug("proposing session expiry failed again; retrying", "session", id, "attempt", attempt+1, "error", err)
		}
		if !sleep(ctx, backoff) {
			return
		}
		if backoff < time.Second {
			backoff *= 2
		}
	}
}

// sleep waits d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

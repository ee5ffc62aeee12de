// Package session keeps sessions alive on the leader (SPEC §4): it holds
// every session's heartbeat deadline in memory, renews it on each heartbeat
// (heartbeats are never logged), and proposes ExpireSession when a deadline
// passes, retrying until the entry is applied or leadership is lost. A node
// that gains leadership re-arms every session with a full TTL, and only
// after it has applied the whole log; a node that loses it stops all timers.
// Followers expire nothing.
package session

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Expirer proposes an ExpireSession entry and returns once it is applied.
type Expirer interface {
	Expire(ctx context.Context, session uint64) error
}

// Config configures a Tracker.
type Config struct {
	Expirer Expirer
	// Tick is the resolution of deadlines (default 50ms): a session expires
	// between its deadline and one tick later.
	Tick   time.Duration
	Logger hclog.Logger
	// Now is the clock (default time.Now); tests replace it.
	Now func() time.Time
}

// Tracker is the leader's table of session deadlines.
type Tracker struct {
	cfg Config

	mu      sync.Mutex
	leading bool
	epoch   uint64 // bumped on every leadership change: stale expiries stop
	ttl     map[uint64]time.Duration
	due     map[uint64]time.Time
	// wheel holds, per tick slot, the sessions whose deadline fell in it
	// when it was last set; entries are checked against due when the slot
	// fires, so a heartbeat only appends and never searches.
	wheel    map[int64][]uint64
	lastSlot int64
	expiring map[uint64]bool
	// termCtx lives as long as the current term of leadership: the
	// expiries proposed in it stop with it.
	termCtx context.Context
	stop    context.CancelFunc
}

// New returns a Tracker that is not leading.
func New(cfg Config) *Tracker {
	if cfg.Tick <= 0 {
		cfg.Tick = 50 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Tracker{cfg: cfg, ttl: map[uint64]time.Duration{}, due: map[uint64]time.Time{}, wheel: map[int64][]uint64{}, expiring: map[uint64]bool{}}
}

// Info is what Lead needs of a session.
type Info struct {
	ID  uint64
	TTL time.Duration
}

// Lead starts leading: every session gets a full TTL from now. Call it only
// once this node has applied every entry of earlier terms (a barrier), so
// that no session is judged on a stale table.
func (t *Tracker) Lead(sessions []Info) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.resetLocked()
	t.leading = true
	t.termCtx, t.stop = context.WithCancel(context.Background())
	now := t.cfg.Now()
	t.lastSlot = t.reached(now)
	for _, s := range sessions {
		t.armLocked(s.ID, s.TTL, now)
	}
	t.cfg.Logger.Info("leading: re-armed sessions with a full TTL", "sessions", len(sessions))
}

// Follow stops leading: every timer stops and pending expiries give up.
func (t *Tracker) Follow() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.leading {
		t.cfg.Logger.Info("no longer leading: session timers stopped")
	}
	t.resetLocked()
}

func (t *Tracker) resetLocked() {
	if t.stop != nil {
		t.stop()
		t.termCtx, t.stop = nil, nil
	}
	t.leading = false
	t.epoch++
	clear(t.ttl)
	clear(t.due)
	clear(t.wheel)
	clear(t.expiring)
}

// Leading reports whether the tracker is leading.
func (t *Tracker) Leading() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.leading
}

// Opened arms a session just opened (called for every applied OpenSession;
// ignored when not leading).
func (t *Tracker) Opened(id uint64, ttl time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.leading {
		t.armLocked(id, ttl, t.cfg.Now())
	}
}

// Ended forgets a session that was closed or expired.
func (t *Tracker) Ended(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.ttl, id)
	delete(t.due, id)
	delete(t.expiring, id)
}

// Touch renews the deadlines of sessions after a heartbeat received at
// (or after) sent: each gets a full TTL from now. It returns the ids it does
// not know (ended sessions) and ok=false when this node is not leading.
func (t *Tracker) Touch(ids ...uint64) (unknown []uint64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.leading {
		return nil, false
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
	return unknown, true
}

// slot is the wheel slot of a deadline: the first tick boundary at or after
// it. A slot fires once the clock has reached its boundary (see Due), so a
// deadline never fires early.
func (t *Tracker) slot(at time.Time) int64 {
	return (at.UnixNano() + int64(t.cfg.Tick) - 1) / int64(t.cfg.Tick)
}

// reached is the last slot whose boundary the clock has reached at now.
func (t *Tracker) reached(now time.Time) int64 {
	return now.UnixNano() / int64(t.cfg.Tick)
}

func (t *Tracker) armLocked(id uint64, ttl time.Duration, now time.Time) {
	d := now.Add(ttl)
	t.ttl[id] = ttl
	t.due[id] = d
	s := t.slot(d)
	t.wheel[s] = append(t.wheel[s], id)
}

// Due returns the sessions whose deadline has passed at now and marks them
// as expiring. Run calls it every tick.
func (t *Tracker) Due(now time.Time) []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.leading {
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

func (t *Tracker) fireLocked(s int64, now time.Time, out []uint64) []uint64 {
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
// each session whose deadline passed. When ctx ends the tracker stops
// leading.
func (t *Tracker) Run(ctx context.Context) {
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

// expire proposes the expiry of one session until it is applied, the
// session ends otherwise, or this term of leadership ends.
func (t *Tracker) expire(ctx context.Context, epoch, id uint64) {
	backoff := 50 * time.Millisecond
	for {
		t.mu.Lock()
		current := t.leading && t.epoch == epoch && t.expiring[id]
		t.mu.Unlock()
		if !current {
			return
		}
		t.cfg.Logger.Info("session deadline passed: expiring it", "session", id)
		err := t.cfg.Expirer.Expire(ctx, id)
		if err == nil {
			t.Ended(id)
			return
		}
		t.cfg.Logger.Warn("proposing session expiry failed; retrying", "session", id, "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		if backoff < time.Second {
			backoff *= 2
		}
	}
}

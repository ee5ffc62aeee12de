package loadgen

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// The idle workload's senders. Each shard's sender keeps its sessions on a
// timing wheel and looks at a session only when it has something to do: send
// its next heartbeat (every TTL/3), or check, TTL/10 after a send, that
// the heartbeat was acknowledged and send it again if not, as the Go client
// does. A session is looked at about twice per TTL/3, not at every tick:
// with 100,000 sessions a sender that scanned them all every tick spent a
// tenth of a core or more reading their flags, on a machine whose two cores
// the nodes need.
//
// A stream that ends (a node that knows no leader ends its streams during
// an election) is attached again by a goroutine of its own, at most
// reattachers at a time, never by the sender: an attach waits for the node
// (up to its 5 s wait for the applied index), and a sender that attached
// serially stopped heartbeating its whole shard meanwhile, so an election
// turned into mass expiry.

// idleTick is the resolution of the senders' wheels.
const idleTick = 20 * time.Millisecond

// reattachers bounds the concurrent reattaches of the whole run.
const reattachers = 64

// shard is the sessions one sender goroutine heartbeats.
type shard struct {
	mu       sync.Mutex
	incoming []*idleSession // attached by openAll, not yet on the wheel

	// Owned by the sender.
	wheel [][]*idleSession // by slot (tick number mod len): the sessions to look at then
	slot  int64            // the last tick looked at
}

// add hands a newly attached session to the shard's sender; it is looked at
// (and heartbeats) on the sender's next tick.
func (sh *shard) add(s *idleSession) {
	sh.mu.Lock()
	sh.incoming = append(sh.incoming, s)
	sh.mu.Unlock()
}

// at puts s on the wheel to be looked at again at (or just after) t.
func (sh *shard) at(s *idleSession, t time.Duration) {
	slot := int64(t / idleTick)
	if slot <= sh.slot {
		slot = sh.slot + 1
	}
	if max := sh.slot + int64(len(sh.wheel)) - 1; slot > max {
		slot = max
	}
	i := slot % int64(len(sh.wheel))
	sh.wheel[i] = append(sh.wheel[i], s)
	s.slot = slot
}

// send heartbeats the sessions of one shard, each every TTL/3 from its
// first heartbeat (sent once it is attached).
func (r *idleRun) send(ctx context.Context, sh *shard) {
	sh.wheel = make([][]*idleSession, int(r.cfg.TTL/idleTick)+2)
	sh.slot = int64(r.now() / idleTick)
	tick := time.NewTicker(idleTick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := r.now()
		sh.mu.Lock()
		incoming := sh.incoming
		sh.incoming = nil
		sh.mu.Unlock()
		for _, s := range incoming {
			r.visit(ctx, sh, s, now)
		}
		// Every slot up to now, also those a late tick skipped.
		for last := int64(now / idleTick); sh.slot < last; {
			sh.slot++
			i := sh.slot % int64(len(sh.wheel))
			due := sh.wheel[i]
			sh.wheel[i] = nil
			for _, s := range due {
				if s.slot == sh.slot { // else a later at moved it
					r.visit(ctx, sh, s, now)
				}
			}
			if cap(due) <= 1024 { // reuse the slot's array unless it is a big one
				sh.wheel[i] = due[:0]
			}
		}
	}
}

// visit looks at one session: counts it in jeopardy if it has gone a TTL
// without an acknowledged heartbeat, sends its heartbeat if one is due
// (or the last went unacknowledged for TTL/10), and puts it back on the
// wheel for its next look. An ended session leaves the wheel.
func (r *idleRun) visit(ctx context.Context, sh *shard, s *idleSession, now time.Duration) {
	if s.ended.Load() {
		return
	}
	every, retry := r.cfg.TTL/3, r.cfg.TTL/10
	r.checkJeopardy(s, now)
	st := s.stream.Load()
	if st == nil {
		// Detached: a goroutine attaches it again; look again soon, and
		// send as soon as it is attached.
		if s.attaching.CompareAndSwap(false, true) {
			go r.reattach(ctx, s)
		}
		s.due = now
		sh.at(s, now+5*idleTick)
		return
	}
	// A stream just attached again heartbeats at once, as the Go client's
	// does.
	if s.beatNow.Swap(false) {
		s.due = now
	}
	// As the Go client does: a heartbeat still unacknowledged after TTL/10
	// (dropped by a node during an election) is sent again.
	last := time.Duration(s.sentAt[s.nextID%4].Load())
	unacked := s.nextID > 0 && time.Duration(s.acked.Load()) < last
	resend := unacked && now-last >= retry
	if now < s.due && !resend {
		next := s.due
		if unacked {
			next = min(next, last+retry)
		}
		sh.at(s, next)
		return
	}
	s.due = max(s.due+every, now+every/2)
	if resend {
		s.due = now + every
	}
	s.nextID++
	s.sentAt[s.nextID%4].Store(int64(now))
	if err := st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Heartbeat{Heartbeat: &pb.Heartbeat{Id: s.nextID}}}); err == nil && r.recording.Load() {
		r.hbs.Add(1)
	}
	sh.at(s, min(s.due, now+retry))
}

// checkJeopardy counts s once if, at now, a whole TTL has passed since the
// send time of its newest acknowledged heartbeat.
func (r *idleRun) checkJeopardy(s *idleSession, now time.Duration) {
	if now-time.Duration(s.acked.Load()) > r.cfg.TTL && s.jeopard.CompareAndSwap(false, true) {
		r.jeopardy.Add(1)
	}
}

// reattach attaches s's stream again, retrying while the node is
// unavailable, until it succeeds, the session has ended or ctx ends. With
// IdleConfig.ReattachMax set, each try waits a random time in the
// configured window first and goes to a node picked at random, and no
// bound applies to the tries in flight.
func (r *idleRun) reattach(ctx context.Context, s *idleSession) {
	defer s.attaching.Store(false)
	jitter := r.cfg.ReattachMax > 0
	for backoff := 50 * time.Millisecond; ctx.Err() == nil && !s.ended.Load(); backoff = min(2*backoff, time.Second) {
		if jitter {
			sleepCtx(ctx, r.cfg.ReattachMin+rand.N(max(r.cfg.ReattachMax-r.cfg.ReattachMin, 1)))
			if ctx.Err() != nil {
				return
			}
			s.cc = r.conns[rand.N(len(r.conns))] // only this goroutine attaches s
		} else {
			select {
			case r.attachSem <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
		r.reattachTries.add(r.now())
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := r.attach(ctx, actx, s)
		cancel()
		if !jitter {
			<-r.attachSem
		}
		switch {
		case err == nil:
			r.reattached.add(r.now())
			if jitter { // heartbeat at once, as the Go client does
				s.beatNow.Store(true)
				r.shards[s.num%len(r.shards)].add(s)
			}
			return
		case status.Code(err) == codes.FailedPrecondition: // the session has ended
			if s.ended.CompareAndSwap(false, true) {
				r.expired.Add(1)
			}
			if s.locked.Load() {
				r.loseLock(s)
			}
			return
		}
		r.retries.Add(1)
		if !jitter {
			sleepCtx(ctx, backoff)
		}
	}
}

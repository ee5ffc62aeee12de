package lockcluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// Mode is a lock mode.
type Mode int

const (
	// Exclusive: no other lock on the name is granted while it is held.
	Exclusive Mode = iota
	// Shared: other shared locks on the name may be held at the same time.
	Shared
)

func (m Mode) String() string {
	switch m {
	case Exclusive:
		return "exclusive"
	case Shared:
		return "shared"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Options are the spec's LockOptions. The request's context is its
// AbortSignal: cancelling it before the grant aborts the request.
type Options struct {
	Mode Mode
	// IfAvailable grants the lock only if it can be granted at once; if
	// not, Request's callback runs with a nil *Lock.
	IfAvailable bool
	// Steal releases every held lock on the name(s) (their holders' lock
	// contexts are cancelled with ErrStolen) and grants this one at once,
	// ahead of any queue. Exclusive mode only.
	Steal bool
	// Scope names more resources to lock together with the first name,
	// all at once: the lock is granted when every name can be granted,
	// and never holds some of them while waiting for others.
	Scope []string
	// OnQueued, if set, is called once, on the caller's goroutine, when
	// the cluster has queued the request instead of granting it at once
	// (say, to log who holds the lock with Query). The browser's API has
	// no such hook.
	OnQueued func()
	// MaxHolders makes a Shared request a semaphore (SPEC §14): at most
	// MaxHolders holders hold the name at once; later ones queue, FIFO.
	// Every held or queued shared request of a name must agree on it (one
	// with another value fails with ErrNotSupported, naming the name's).
	// 0: unlimited, as in the browser. Only with Shared
	// (ErrNotSupported); negative is ErrInvalid. Needs a cluster of this
	// release.
	MaxHolders int
}

// Lock is a held lock.
type Lock struct {
	s          *clientSession
	r          *request
	names      []string
	mode       Mode
	token      uint64
	acquiredAt time.Time
	ctx        context.Context
	cancel     context.CancelCauseFunc
	lost       error // set, under the session's lock, when the lock ended
	once       sync.Once
	relErr     error
	// written is the record the release wrote (ReleaseWithRecord), set
	// under the session's lock once the cluster answered it.
	written *Record
	// records are the records of the lock's names as they stood at the
	// grant (record.go); recordsKnown is false while a grant learned from
	// a sync (which does not carry them) has not had them read.
	records      []Record
	recordsKnown bool
}

// Name is the (first) name the lock holds.
func (l *Lock) Name() string { return l.names[0] }

// Names are all the names the lock holds (more than one for a scope).
func (l *Lock) Names() []string { return append([]string(nil), l.names...) }

// Mode is the lock's mode.
func (l *Lock) Mode() Mode { return l.mode }

// RequestID is the id of the request that the lock was granted to, unique
// within the session: LockInfo.RequestID in Query.
func (l *Lock) RequestID() uint64 { return l.r.id }

// Token is the lock's fencing token: the Raft index of the entry that
// granted it. Tokens of a name only grow.
func (l *Lock) Token() uint64 { return l.token }

// AcquiredAt is when the leader granted the lock.
func (l *Lock) AcquiredAt() time.Time { return l.acquiredAt }

// Context is cancelled when the lock ends: released, stolen (cause
// ErrStolen), or its session lost (cause ErrSessionLost). context.Cause
// tells which.
//
// Its Done, Err and Value (so context.Cause too) compare the monotonic
// clock with the session's jeopardy deadline (session/DESIGN.md, "The
// timeline") before they answer: a holder that was paused past it
// (SIGSTOP, a long GC pause) sees the lock lost on its first look after
// resuming, not once a goroutine of the client has been scheduled.
// Contexts derived from it learn of the loss when the client cancels it.
func (l *Lock) Context() context.Context { return l.ctx }

// Done is closed when the lock ends. Like Err it checks the jeopardy
// deadline first.
func (l *Lock) Done() <-chan struct{} { return l.ctx.Done() }

// Err is nil while the lock is held, then why it ended. It checks the
// jeopardy deadline first (see Context).
func (l *Lock) Err() error { return context.Cause(l.ctx) }

// lostCause is why the lock was lost (stolen, its session lost), or nil
// while it is held or after its holder released it. It checks the
// jeopardy deadline first.
func (l *Lock) lostCause() error {
	l.s.checkJeopardy()
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.lost == ErrReleased {
		return nil
	}
	return l.lost
}

// lockCtx is a held lock's context: the cancel-cause context the client
// ends, checked against the jeopardy deadline on every look (why:
// session/DESIGN.md, "The timeline"). The context contract allows Err to
// report the end before a goroutine would have: check cancels the inner
// context (closing Done) before Err returns non-nil.
//
// A look may come while the session's lock is held (a request whose
// context derives from a lock's is granted under it), so check takes no
// lock: it cancels this lock's context at once and leaves ending the rest
// of the session to a goroutine.
type lockCtx struct {
	context.Context
	s      *clientSession
	cancel context.CancelCauseFunc
}

func (c *lockCtx) check() {
	if c.s.overdue() {
		// Also when the session has ended or is ending: its end may not
		// have reached this lock yet (end cancels the session first).
		c.cancel(c.s.jeopardyErr)
		if c.s.ctx.Err() == nil {
			go c.s.jeopardy()
		}
	}
}

func (c *lockCtx) Done() <-chan struct{} {
	c.check()
	return c.Context.Done()
}

func (c *lockCtx) Err() error {
	c.check()
	return c.Context.Err()
}

func (c *lockCtx) Value(key any) any {
	c.check()
	return c.Context.Value(key)
}

// Release releases the lock. It is idempotent: later calls return the
// first one's answer.
//
// If the cluster does not confirm the release before ctx ends (or answers
// with an error that says nothing about the lock, such as a timeout of its
// own), Release returns that error, yet the lock ends here all the same:
// its context is cancelled with ErrReleased, and the client goes on
// sending the release in the background, with the same request id, until
// the cluster answers it or the session ends. A lock its holder let go of
// is never left held by a session that lives on.
//
// Releasing a lock that was already lost returns nil. If the release finds
// that the lock was stolen before the theft's news reached this client, its
// context is cancelled with ErrStolen, not ErrReleased (and Request returns
// an error matching ErrStolen, as if the holder had heard in time).
func (l *Lock) Release(ctx context.Context) error {
	return l.end(ctx, nil)
}

// end releases the lock, with the record write rec when it is not nil
// (ReleaseWithRecord): Release's work, done once for both.
func (l *Lock) end(ctx context.Context, rec *pb.SetRecordRequest) error {
	l.once.Do(func() {
		l.s.mu.Lock()
		lost := l.lost
		l.s.mu.Unlock()
		if lost != nil { // stolen or its session lost: nothing to release
			l.s.forget(l.r)
			return
		}
		var answered pb.Status
		release := func(ctx context.Context, lc pb.LocksClient) error {
			resp, err := lc.Release(ctx, &pb.ReleaseRequest{Namespace: l.s.c.cfg.namespace, SessionId: l.s.id, RequestId: l.r.id, Token: l.token, AckBelow: l.s.ackBelow(), SessionSecret: l.s.secret})
			if err == nil {
				l.s.c.seen(resp.Index)
				answered = resp.Status
			}
			return err
		}
		var lostRec lostAnswer
		if rec != nil {
			release = func(ctx context.Context, lc pb.LocksClient) error {
				rec.AckBelow = l.s.ackBelow()
				resp, err := lc.SetRecord(ctx, rec)
				lostRec.note(err)
				if err == nil {
					l.s.c.seen(resp.Index)
					answered = resp.Status
					w := recordOf(resp.Record)
					if w == nil || resp.Duplicate {
						// A retry of a release with record that was applied
						// (its answer lost): what it wrote, without the
						// index and time, which the duplicate does not say.
						w = &Record{Name: rec.Name, Value: rec.Value, Token: rec.Token}
						if rec.Delete {
							w.Value = nil
						}
					}
					l.s.mu.Lock()
					l.written = w
					l.s.mu.Unlock()
				}
				return err
			}
		}
		err := l.s.c.call(ctx, release)
		if rec != nil && errors.Is(err, ErrNotHolder) {
			// The lock was lost before the release reached the cluster
			// (stolen, expired): nothing was written (unless an earlier
			// attempt's answer was lost: ErrOutcomeUnknown), and the
			// holder hears of the loss now, as Release finds a theft.
			l.relErr = lostRec.verdict(err, rec.Name)
			l.s.mu.Lock()
			if l.lost == nil {
				l.lost = fmt.Errorf("%w: %w", ErrAborted, err)
			}
			lost := l.lost
			l.s.mu.Unlock()
			l.cancel(lost)
			l.s.forget(l.r)
			return
		}
		if errors.Is(err, ErrSessionClosed) {
			// The session ended before the release: the lock was lost (the
			// cluster expired it), and the holder must hear of it. (Unless
			// an earlier attempt's answer was lost: then the release, and
			// its record, may have been applied before the session ended.)
			l.relErr = fmt.Errorf("%w: the session ended before the lock was released: %v", ErrSessionLost, err)
			if rec != nil {
				if v := lostRec.verdict(err, rec.Name); v != err {
					l.relErr = v
				}
			}
			l.s.mu.Lock()
			l.lost = l.relErr
			l.s.mu.Unlock()
			l.cancel(l.relErr)
			l.s.forget(l.r)
			l.s.endIfNotOpen(err)
			return
		}
		if err != nil && !final(err) && l.s.c.closedErr() == nil {
			// Not confirmed, and not refused: the holder has let go of the
			// lock, so it ends here, and the client goes on releasing it
			// (persist.go) rather than leave it held by a live session.
			l.relErr = fmt.Errorf("%w (the release is not confirmed: the client goes on sending it while the session lives)", err)
			l.s.mu.Lock()
			l.lost = ErrReleased
			l.s.mu.Unlock()
			l.cancel(ErrReleased)
			go l.releaseLater(release)
			return
		}
		if err != nil {
			l.relErr = err
			return
		}
		cause := ErrReleased
		if answered == pb.Status_STATUS_STOLEN {
			// Stolen before the release reached the cluster, and before
			// the theft's event reached this client: the lock ended with
			// the theft, and its holder hears of it now.
			cause = ErrStolen
		}
		l.s.mu.Lock()
		l.lost = cause
		l.s.mu.Unlock()
		l.cancel(cause)
		l.s.forget(l.r)
	})
	return l.relErr
}

// releaseLater sends the release of a lock whose Release could not get it
// confirmed, until the cluster answers or the session ends.
func (l *Lock) releaseLater(release func(context.Context, pb.LocksClient) error) {
	err := l.s.persist(release)
	l.s.endIfNotOpen(err)
	if err == nil || errors.Is(err, ErrSessionClosed) {
		l.s.forget(l.r)
	}
}

// request is one request of the session, outstanding until the client
// knows its final outcome.
type request struct {
	s         *clientSession
	id        uint64
	names     []string
	mode      Mode
	parent    context.Context // the lock's context derives from it
	done      chan outcome    // the grant or the end of the pending request
	resolved  bool
	known     uint64 // the Raft index of the newest news of it
	abandoned bool   // its caller gave up: release it if it is granted
	lock      *Lock  // set once granted
	// grantRecords are the records the grant carried (LockResponse or
	// GRANTED event), set before the grant is applied; recordsKnown says
	// whether the grant came with them (a sync's does not).
	grantRecords []Record
	recordsKnown bool
}

type outcome struct {
	token      uint64
	acquiredAt time.Time
	err        error // the request ended without a lock
	lost       error // the lock ended (when granted)
}

// finish resolves r once, under the session's lock: a grant creates its
// Lock; an end cancels the Lock if there is one.
func (r *request) finish(o outcome) {
	if r.lock != nil && o.lost != nil && r.lock.lost == nil {
		r.lock.lost = o.lost
		r.lock.cancel(o.lost)
	}
	if r.resolved {
		return
	}
	r.resolved = true
	if o.err == nil && o.lost != nil {
		o.err = o.lost
	}
	if o.err == nil {
		l := &Lock{s: r.s, r: r, names: r.names, mode: r.mode, token: o.token, acquiredAt: o.acquiredAt,
			records: r.grantRecords, recordsKnown: r.recordsKnown}
		var inner context.Context
		inner, l.cancel = context.WithCancelCause(r.parent)
		l.ctx = &lockCtx{Context: inner, s: r.s, cancel: l.cancel}
		r.lock = l
	}
	r.done <- o
}

func (s *clientSession) newRequest(parent context.Context, names []string, mode Mode) *request {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &request{s: s, id: s.nextID, names: names, mode: mode, parent: parent, done: make(chan outcome, 1)}
	s.nextID++
	s.reqs[r.id] = r
	return r
}

// forget drops a request whose outcome the client has.
func (s *clientSession) forget(r *request) {
	s.mu.Lock()
	delete(s.reqs, r.id)
	s.mu.Unlock()
}

// ackBelow: every request id below it has a known outcome (SPEC §6).
func (s *clientSession) ackBelow() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	low := s.nextID
	for id := range s.reqs {
		low = min(low, id)
	}
	return low
}

func causeError(c pb.Cause, reason string) error {
	switch c {
	case pb.Cause_CAUSE_STOLEN:
		return ErrStolen
	case pb.Cause_CAUSE_SESSION_CLOSED, pb.Cause_CAUSE_SESSION_EXPIRED:
		return fmt.Errorf("%w: %s", ErrSessionLost, c)
	}
	if reason != "" {
		return errors.New(reason)
	}
	return errors.New("aborted")
}

// apply moves a request to the state the cluster reports.
func (s *clientSession) apply(r *request, st pb.Status, token uint64, at time.Time, cause pb.Cause, reason string) {
	switch st {
	case pb.Status_STATUS_GRANTED:
		if r.abandoned {
			go s.releaseAbandoned(r, token)
			return
		}
		r.finish(outcome{token: token, acquiredAt: at})
	case pb.Status_STATUS_QUEUED:
	case pb.Status_STATUS_NOT_AVAILABLE:
		r.finish(outcome{err: errNotAvailable})
		delete(s.reqs, r.id)
	case pb.Status_STATUS_ABORTED, pb.Status_STATUS_STOLEN, pb.Status_STATUS_RELEASED:
		err := causeError(cause, reason)
		if st == pb.Status_STATUS_STOLEN {
			err = ErrStolen
		}
		r.finish(outcome{lost: err})
		delete(s.reqs, r.id)
	}
}

// releaseAbandoned releases a lock granted to a request its caller gave up
// on (its abort could not be delivered), sending the release until the
// cluster answers it or the session ends (persist.go).
func (s *clientSession) releaseAbandoned(r *request, token uint64) {
	err := s.persist(func(ctx context.Context, lc pb.LocksClient) error {
		_, err := lc.Release(ctx, &pb.ReleaseRequest{Namespace: s.c.cfg.namespace, SessionId: s.id, RequestId: r.id, Token: token, SessionSecret: s.secret})
		return err
	})
	s.endIfNotOpen(err)
	s.forget(r)
}

// event applies one event of the stream.
func (s *clientSession) event(e *pb.Event) {
	s.c.seen(e.Index)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.Seq <= s.lastSeq {
		return // already reflected by a sync
	}
	s.lastSeq = e.Seq
	if e.Kind == pb.Event_SESSION_ENDED {
		go s.end(fmt.Errorf("%w: %s", ErrSessionLost, e.Cause))
		return
	}
	r := s.reqs[e.RequestId]
	if r == nil {
		return
	}
	r.known = max(r.known, e.Index)
	switch e.Kind {
	case pb.Event_GRANTED:
		r.grantRecords, r.recordsKnown = recordsOf(e.Records), true
		s.apply(r, pb.Status_STATUS_GRANTED, e.Token, e.AcquiredAt.AsTime(), 0, "")
	case pb.Event_NOT_AVAILABLE:
		s.apply(r, pb.Status_STATUS_NOT_AVAILABLE, 0, time.Time{}, 0, "")
	case pb.Event_ABORTED:
		s.apply(r, pb.Status_STATUS_ABORTED, e.Token, time.Time{}, e.Cause, e.Reason)
	case pb.Event_LOCK_LOST:
		r.finish(outcome{lost: causeError(e.Cause, e.Reason)})
		delete(s.reqs, r.id)
	}
}

// sync applies where every request stands after a (re)connection.
func (s *clientSession) sync(m *pb.Synced) {
	s.c.seen(m.Index)
	s.mu.Lock()
	defer s.mu.Unlock()
	states := make(map[uint64]*pb.RequestState, len(m.Requests))
	for _, rs := range m.Requests {
		states[rs.RequestId] = rs
	}
	for id, r := range s.reqs {
		if r.known > m.Index {
			// The node synced from is behind what the client already knows
			// of this request (a response from the leader overtook it).
			continue
		}
		rs := states[id]
		if rs == nil {
			if r.lock != nil { // held, and the cluster no longer knows it
				r.finish(outcome{lost: ErrSessionLost})
				delete(s.reqs, id)
			}
			continue // not yet arrived: its Request call will tell
		}
		if r.lock != nil && rs.Status == pb.Status_STATUS_GRANTED {
			continue
		}
		s.apply(r, rs.Status, rs.Token, rs.AcquiredAt.AsTime(), rs.Cause, rs.Reason)
	}
	s.lastSeq = max(s.lastSeq, m.EventSeq)
	s.connected = true
}

var errNotAvailable = errors.New("lockcluster: not available")

// ErrNotAvailable is returned by Acquire with IfAvailable when the lock
// cannot be granted at once (Request calls its callback with nil instead).
var ErrNotAvailable = errNotAvailable

package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockcluster/lockcluster/fsm"
)

// observer is what the request handlers of internal/server report (its
// Observer), on the node that proposed the entry (the leader: a follower
// that forwards a call reports nothing, the leader's handler does).
// *Metrics implements it.
type observer interface {
	// Requested reports a Request entry applied without error: start is
	// when the call arrived, r the entry's Result. A request granted at once
	// (r.Status granted, including a steal) is observed now; a queued one
	// when its grant is applied, so that acquire latency includes the wait
	// in the queue. Duplicates (r.Duplicate, a retry) are ignored.
	Requested(namespace string, session, requestID uint64, start time.Time, r fsm.Result)
	// Freed reports an applied Release, Abort, CloseSession or
	// ExpireSession: start is when the call arrived (for an expiry, when
	// the leader decided to propose it). When the entry handed the lock on
	// (granted a waiting request), the time from start to now is a
	// hand-off; otherwise nothing is observed.
	Freed(start time.Time, ap fsm.Applied)
	// Refused counts a call refused for its credentials (refusals.go).
	Refused(reason string)
}

var _ observer = (*Metrics)(nil)

// Requested implements internal/server's Observer.
func (m *Metrics) Requested(namespace string, session, requestID uint64, start time.Time, r fsm.Result) {
	m.latency.requested(namespace, session, requestID, start, r)
}

// Freed implements internal/server's Observer.
func (m *Metrics) Freed(start time.Time, ap fsm.Applied) { m.latency.freed(start, ap) }

// maxWaiting bounds the queued requests tracked. A request normally leaves
// the map with its grant, its abort or its session's end; one whose end a
// node never saw (a snapshot skipped it) would stay: past the bound the map
// starts again, losing the acquire latency of the requests waiting then.
const maxWaiting = 1 << 17

type waitKey struct{ session, request uint64 }

type waiting struct {
	namespace string
	start     time.Time
}

type latency struct {
	rec              *recorder
	acquire, handoff *prometheus.HistogramVec

	mu      sync.Mutex
	waiting map[waitKey]waiting
}

func newLatency(rec *recorder) *latency {
	hist := func(name, help string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: latencyBuckets}, []string{"namespace"})
	}
	return &latency{
		rec: rec,
		acquire: hist("lockcluster_acquire_seconds",
			"Time from a lock request's arrival at the leader to its grant being applied there, waiting in the queue included, per namespace."),
		handoff: hist("lockcluster_handoff_seconds",
			"Time from the arrival at the leader of a release, abort, session close or expiry that freed a lock to the grant of the next waiter being applied there, per namespace."),
		waiting: make(map[waitKey]waiting),
	}
}

func (l *latency) register(reg prometheus.Registerer) { reg.MustRegister(l.acquire, l.handoff) }

func (l *latency) requested(namespace string, session, requestID uint64, start time.Time, r fsm.Result) {
	if r.Err != nil || r.Duplicate {
		return
	}
	switch r.Status {
	case fsm.StatusGranted:
		l.acquire.WithLabelValues(label(namespace)).Observe(time.Since(start).Seconds())
	case fsm.StatusQueued:
		l.mu.Lock()
		defer l.mu.Unlock()
		// The entries after the request's may already be applied (raft
		// answers a batch's proposers after applying the whole batch): its
		// grant, then, went by before it was tracked. Ask the machine, under
		// l.mu so that a grant applied meanwhile is seen exactly once:
		// either here or by applied, which waits for l.mu.
		if granted, ended := l.settled(session, requestID); granted {
			l.acquire.WithLabelValues(label(namespace)).Observe(time.Since(start).Seconds())
			return
		} else if ended {
			return
		}
		if len(l.waiting) >= maxWaiting {
			clear(l.waiting)
		}
		l.waiting[waitKey{session, requestID}] = waiting{namespace: namespace, start: start}
	}
}

// settled reports whether a request has been granted (held, or held then
// released or stolen), or has ended without a grant, or its session has.
func (l *latency) settled(session, requestID uint64) (granted, ended bool) {
	reqs, _, ok := l.rec.m.SessionRequests(session)
	if !ok {
		return false, true
	}
	for _, rs := range reqs {
		if rs.RequestID != requestID {
			continue
		}
		switch rs.Status {
		case fsm.StatusQueued:
			return false, false
		case fsm.StatusGranted, fsm.StatusReleased, fsm.StatusStolen:
			return true, true
		default:
			return false, true
		}
	}
	return false, true
}

// applied settles the tracked requests an entry granted or ended.
func (l *latency) applied(ap fsm.Applied) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.waiting) == 0 {
		return
	}
	for i := range ap.Events {
		e := &ap.Events[i]
		switch e.Kind {
		case fsm.EventGranted:
			k := waitKey{e.Session, e.RequestID}
			if w, ok := l.waiting[k]; ok {
				l.acquire.WithLabelValues(label(w.namespace)).Observe(time.Since(w.start).Seconds())
				delete(l.waiting, k)
			}
		case fsm.EventAborted: // also every pending request of a session that ends
			delete(l.waiting, waitKey{e.Session, e.RequestID})
		}
	}
}

func (l *latency) freed(start time.Time, ap fsm.Applied) {
	if ap.Result.Err != nil || ap.Result.Duplicate {
		return
	}
	for i := range ap.Events {
		if e := &ap.Events[i]; e.Kind == fsm.EventGranted {
			// The waiter's session is live: its namespace is known.
			ns := l.rec.namespace(e.Session)
			l.handoff.WithLabelValues(label(ns)).Observe(time.Since(start).Seconds())
			return
		}
	}
}

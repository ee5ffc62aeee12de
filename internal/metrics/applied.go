package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockcluster/lockcluster/fsm"
)

// recorder counts the events of applied entries, per namespace. Events name
// a session, not its namespace, so the recorder keeps a map from the live
// sessions to their namespaces: filled from the machine the first time and
// whenever a session is unknown, added to when a session opens, and emptied
// of a session when it ends. A session the machine no longer knows and that
// was never seen (its last entry is the first this node hears of it, after
// a snapshot was installed) counts under namespace "".
type recorder struct {
	m      State
	mu     sync.Mutex
	ns     map[uint64]string
	primed bool
	bound  *nsBound // the expiries' namespaces (limits.go)

	grants, notAvailable, steals, expiries *prometheus.CounterVec
	aborts                                 *prometheus.CounterVec
}

// newRecorder returns the counters of applied events; replica, when set,
// are their constant labels (see the package doc: every node counts the same
// events).
func newRecorder(m State, replica prometheus.Labels) *recorder {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: replica}, append([]string{"namespace"}, labels...))
	}
	return &recorder{
		m:     m,
		ns:    make(map[uint64]string),
		bound: newNSBound(m),
		grants: counter("lockcluster_grants_total",
			"Locks granted (granted events; a scope counts once), per namespace."),
		notAvailable: counter("lockcluster_not_available_total",
			"ifAvailable requests that found their lock taken, per namespace."),
		aborts: counter("lockcluster_aborts_total",
			"Requests that ended before their grant (aborted events), per namespace and cause: aborted (by the client), session-closed, session-expired.", "cause"),
		steals: counter("lockcluster_steals_total",
			"Held locks taken away by a request with steal (lock-lost events with cause stolen), per namespace."),
		expiries: counter("lockcluster_session_expiries_total",
			"Sessions the leader expired for missed heartbeats (session-ended events with cause session-expired), per namespace. Namespace \"\": those past the first 100 namespaces this node counted, or a session this node never saw open (a snapshot skipped it)."),
	}
}

func (r *recorder) register(reg prometheus.Registerer) {
	reg.MustRegister(r.grants, r.notAvailable, r.aborts, r.steals, r.expiries)
}

// applied counts one entry's events. It runs on raft's FSM goroutine, after
// the machine applied the entry.
func (r *recorder) applied(ap fsm.Applied) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.primed {
		r.primeLocked()
	}
	if res := ap.Result; res.Err == nil && res.Status == fsm.StatusOpened && !res.Duplicate {
		r.lookupLocked(res.Session)
		// Sessions whose end this node never saw (a snapshot skipped it)
		// would stay forever: start again from the machine's sessions when
		// the map grows well past them.
		if live := r.m.Stats().Sessions; len(r.ns) > 2*live+1024 {
			r.primeLocked()
		}
	}
	for i := range ap.Events {
		e := &ap.Events[i]
		ns := label(r.namespaceLocked(e.Session))
		switch e.Kind {
		case fsm.EventGranted:
			r.grants.WithLabelValues(ns).Inc()
		case fsm.EventNotAvailable:
			r.notAvailable.WithLabelValues(ns).Inc()
		case fsm.EventAborted:
			r.aborts.WithLabelValues(ns, e.Cause.String()).Inc()
		case fsm.EventLockLost:
			if e.Cause == fsm.CauseStolen {
				r.steals.WithLabelValues(ns).Inc()
			}
		case fsm.EventSessionEnded:
			if e.Cause == fsm.CauseSessionExpired {
				r.expiries.WithLabelValues(r.bound.label(ns, false)).Inc()
			}
			delete(r.ns, e.Session)
		}
	}
}

// namespace returns the namespace of a session ("" when unknown).
func (r *recorder) namespace(session uint64) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.namespaceLocked(session)
}

func (r *recorder) namespaceLocked(session uint64) string {
	if ns, ok := r.ns[session]; ok {
		return ns
	}
	return r.lookupLocked(session)
}

func (r *recorder) lookupLocked(session uint64) string {
	info, ok := r.m.Session(session)
	if !ok {
		return ""
	}
	r.ns[session] = info.Namespace
	return info.Namespace
}

func (r *recorder) primeLocked() {
	clear(r.ns)
	for _, s := range r.m.Sessions() {
		r.ns[s.ID] = s.Namespace
	}
	r.primed = true
}

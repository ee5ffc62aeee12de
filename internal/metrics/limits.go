package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// maxLimitNamespaces bounds the namespaces the refusal, stream-cut and
// session-expiry counters name: namespaces are the callers' words, and
// each one named is a series for as long as the node runs.
const maxLimitNamespaces = 100

// limitCounters count, on the node that decided them, the writes its gate
// refused and the calls auth refused, per namespace and reason
// (internal/server's RefusalObserver), and the session streams it cut for
// falling behind.
//
// The namespace label is bounded: a namespace is named only if it has live
// sessions in the applied state when it is first counted (a refusal in a
// namespace nobody opened, a caller's invention, is not), and only the
// first maxLimitNamespaces such namespaces are; the rest, and those with
// no sessions, are counted under namespace "" (no real namespace is
// empty). A namespace named once keeps its series.
type limitCounters struct {
	names         *nsBound
	refusals, cut *prometheus.CounterVec
}

// nsBound names at most maxLimitNamespaces namespaces in the labels of the
// counters that share it; the rest count under "". A namespace named once
// keeps its name. The refusals and cuts share one; the session expiries
// (applied.go) have their own, so that which namespaces they name follows
// the applied log alone, as on every node.
type nsBound struct {
	m     State
	mu    sync.Mutex
	named map[string]bool
}

func newNSBound(m State) *nsBound { return &nsBound{m: m, named: make(map[string]bool)} }

// label is ns if it is, or may become, one of the named namespaces, else
// "". With live, ns must have sessions in the applied state to become one
// (it is a caller's word: a refusal's); without, it is a namespace that
// had sessions (an ended session's).
func (b *nsBound) label(ns string, live bool) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.named[ns] {
		return label(ns)
	}
	if len(b.named) >= maxLimitNamespaces || ns == "" || (live && b.m.SessionsIn(ns) == 0) {
		return ""
	}
	b.named[ns] = true
	return label(ns)
}

func newLimitCounters(m State) *limitCounters {
	return &limitCounters{
		names: newNSBound(m),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockcluster_namespace_refusals_total",
			Help: "Writes this node refused before the log, per namespace and reason: rate and bytes_rate (the namespace's entries or bytes of entries per second), session_rate (the session's writes per second on this node), sessions (the namespace's sessions limit), pending (the session's pending or held limit), size (a name, scope, label or reason over its limit), session_secret (a wrong or missing secret); and credential: a call or session stream auth refused (no credential, the namespace not granted, no admin credential), of any method, on the node the client called (lockcluster_refused_calls_total has them by auth's reason). Counted where decided: a follower's own refusals on the follower, the leader's of a forwarded write on the leader. Namespace \"\": those past the first 100, or without sessions.",
		}, []string{"namespace", "reason"}),
		cut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockcluster_stream_cuts_total",
			Help: "Session streams this node cut because their client fell too far behind (the backlog cap), per namespace; the client reconnects and resynchronises. Namespace \"\": those past the first 100, or without sessions.",
		}, []string{"namespace"}),
	}
}

func (l *limitCounters) register(reg prometheus.Registerer) { reg.MustRegister(l.refusals, l.cut) }

// label is ns if it is, or may become, one of the named namespaces, else "".
func (l *limitCounters) label(ns string) string { return l.names.label(ns, true) }

// LimitRefused implements internal/server's RefusalObserver.
func (m *Metrics) LimitRefused(namespace, reason string) {
	m.limits.refusals.WithLabelValues(m.limits.label(namespace), reason).Inc()
}

// StreamCut implements internal/server's RefusalObserver.
func (m *Metrics) StreamCut(namespace string) {
	m.limits.cut.WithLabelValues(m.limits.label(namespace)).Inc()
}

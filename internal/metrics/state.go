package metrics

import (
	"strings"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// stateCollector reads the lock manager at scrape time: nothing is kept
// between scrapes, so a namespace that empties disappears with its series.
// The counts are this node's applied state (a follower may lag the leader
// by a few entries).
type stateCollector struct {
	m                                  State
	sessions, held, pending, lastIndex *prometheus.Desc
}

// newStateCollector reads m; replica, when set, are the constant labels of
// the replicated state's gauges (the same on every node: see the package
// doc).
func newStateCollector(m State, replica prometheus.Labels) *stateCollector {
	ns := []string{"namespace"}
	return &stateCollector{
		m:         m,
		sessions:  prometheus.NewDesc("lockcluster_sessions", "Open sessions, per namespace.", ns, replica),
		held:      prometheus.NewDesc("lockcluster_locks_held", "Held locks (granted requests; a scope counts once), per namespace.", ns, replica),
		pending:   prometheus.NewDesc("lockcluster_requests_pending", "Requests waiting in the queues, per namespace.", ns, replica),
		lastIndex: prometheus.NewDesc("lockcluster_applied_index", "Raft index of the last entry the lock manager applied on this node.", nil, nil),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.sessions
	ch <- c.held
	ch <- c.pending
	ch <- c.lastIndex
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.m.NamespaceStats() {
		ns := label(st.Name)
		ch <- prometheus.MustNewConstMetric(c.sessions, prometheus.GaugeValue, float64(st.Sessions), ns)
		ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(st.Held), ns)
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(st.Pending), ns)
	}
	ch <- prometheus.MustNewConstMetric(c.lastIndex, prometheus.GaugeValue, float64(c.m.LastIndex()))
}

// label makes a namespace name a valid label value. The lock manager only
// accepts valid UTF-8 names; this keeps a scrape from ever panicking.
func label(ns string) string {
	if utf8.ValidString(ns) {
		return ns
	}
	return strings.ToValidUTF8(ns, "\uFFFD")
}

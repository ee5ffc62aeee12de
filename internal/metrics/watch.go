package metrics

import "github.com/prometheus/client_golang/prometheus"

// WatchHistory is what the watch gauges read of a node's watch history
// (internal/watchhist.History).
type WatchHistory interface {
	Len() int
	Oldest() uint64
}

// Watches registers the gauges of the node's watches (SPEC §13):
// lockcluster_watches, the Watch streams open on it (open says how many);
// lockcluster_watch_history_changes, the changes its history holds for
// watches to resume from; and lockcluster_watch_history_oldest_index, the
// oldest raft index a watch may resume from here (older ones get
// COMPACTED). Call it once, when the node starts.
func (m *Metrics) Watches(open func() int64, h WatchHistory) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lockcluster_watches",
			Help: "Watch streams open on this node, the status page's live feeds (/api/events) included.",
		}, func() float64 { return float64(open()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lockcluster_watch_history_changes",
			Help: "Changes this node's watch history holds for watches to resume from (--watch-history bounds them).",
		}, func() float64 { return float64(h.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lockcluster_watch_history_oldest_index",
			Help: "The oldest raft index a watch may resume from on this node; a resume from before it fails with COMPACTED.",
		}, func() float64 { return float64(h.Oldest()) }),
	)
}

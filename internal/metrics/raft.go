package metrics

import (
	"sync"
	"time"

	gometrics "github.com/hashicorp/go-metrics"
	gmprom "github.com/hashicorp/go-metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

// raftPrefix is go-metrics' service name: raft's "raft.apply" becomes
// lockcluster_raft_apply, raft-boltdb's lockcluster_raft_boltdb_*.
const raftPrefix = "lockcluster"

// raftExpiration is how long the sink keeps a series nobody updates. raft
// sets some gauges only when something changes (leadership, peers): a long
// retention keeps them visible, and series of removed peers still go away.
const raftExpiration = 24 * time.Hour

// legacyPerPeer are raft's metrics that put a peer's id in their name
// (lockcluster_raft_replication_heartbeat_node1): raft emits each of them
// twice, once so and once with the peer as a label (peer_id), "kept for
// backward compatibility". Only the labelled ones are exported: a name per
// peer is a new family per member, which Prometheus' conventions (and any
// dashboard) cannot aggregate. (raft.Config.NoLegacyTelemetry would stop
// raft emitting them; this keeps the choice with the metrics.)
var legacyPerPeer = []string{
	raftPrefix + ".raft.replication.appendEntries.rpc.",
	raftPrefix + ".raft.replication.appendEntries.logs.",
	raftPrefix + ".raft.replication.heartbeat.",
	raftPrefix + ".raft.replication.installSnapshot.",
}

var raftSink struct {
	once sync.Once
	sink *gmprom.PrometheusSink
}

// raftCollector installs, once per process, go-metrics' global sink (which
// raft and raft-boltdb emit to) as a Prometheus sink, and returns it. The
// sink is a prometheus.Collector: each node's registry registers the same
// one. No goroutine is started: the runtime metrics of go-metrics are off
// (the Go collector has them) and expired series are dropped at scrape time.
func raftCollector() prometheus.Collector {
	raftSink.once.Do(func() {
		// The sink registers itself on opts.Registerer: give it a registry
		// of its own rather than the process-wide default one.
		sink, err := gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{
			Expiration: raftExpiration,
			Registerer: prometheus.NewRegistry(),
			Name:       "lockcluster_raft_sink",
		})
		if err != nil {
			panic("metrics: the go-metrics Prometheus sink: " + err.Error()) // a fresh registry cannot refuse it
		}
		cfg := gometrics.DefaultConfig(raftPrefix)
		cfg.EnableHostname = false
		cfg.EnableRuntimeMetrics = false
		cfg.BlockedPrefixes = legacyPerPeer
		if _, err := gometrics.NewGlobal(cfg, sink); err != nil {
			panic("metrics: go-metrics: " + err.Error()) // New never fails
		}
		raftSink.sink = sink
	})
	return raftSink.sink
}

// Package metrics exposes what a lockcluster node measures, in the
// Prometheus text format, on the node's HTTP port (/metrics):
//
//   - raft's and raft-boltdb's own metrics (lockcluster_raft_*), which
//     hashicorp/raft emits through hashicorp/go-metrics when built with the
//     tag hashicorpmetrics, collected by go-metrics' Prometheus sink;
//   - gRPC server metrics per method (grpc_server_*), with handling-time
//     histograms;
//   - the lock manager's sessions, held locks and pending requests per
//     namespace, and its applied index, read at scrape time;
//   - counters of what applied entries did: grants, ifAvailable misses,
//     aborts, steals and session expiries;
//   - acquire and hand-off latency histograms, fed by the request handlers
//     through the Observer interface;
//   - the Go runtime and process collectors.
//
// Each node has its own registry (tests run several nodes in one process).
// go-metrics has one global sink per process, so raft's metrics are shared:
// every registry in the process shows the same lockcluster_raft_* series,
// which in a process running several nodes mix all of them. A production
// node runs alone in its process and is not affected.
//
// Namespace names are a label of several metrics. Their cardinality is
// bounded only by how many namespaces the cluster serves: that is the
// operator's concern (the configured namespaces when auth is on; with auth
// off any client can create namespaces, and with them series).
package metrics

import (
	"net/http"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/lockcluster/lockcluster/fsm"
)

// Metrics holds one node's metrics. Feed it every applied entry (Applied)
// and the request handlers' timings (Observer); serve Handler on /metrics.
type Metrics struct {
	reg     *prometheus.Registry
	grpc    *grpcprom.ServerMetrics
	rec     *recorder
	latency *latency
}

// latencyBuckets cover a commit on a fast disk (about a millisecond) to
// long waits for a contended lock.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// New returns the metrics of the node whose lock manager is m, on a registry
// of their own. The first call in a process also installs go-metrics'
// global sink, so call it before the node's raft starts.
func New(m *fsm.Machine) *Metrics {
	reg := prometheus.NewRegistry()
	gm := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramBuckets(latencyBuckets)))
	rec := newRecorder(m)
	lat := newLatency(rec)
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		raftCollector(),
		gm,
		newStateCollector(m),
	)
	rec.register(reg)
	lat.register(reg)
	return &Metrics{reg: reg, grpc: gm, rec: rec, latency: lat}
}

// Registry is the node's registry, for tests and for more collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, MaxRequestsInFlight: 4})
}

// ServerOptions install the gRPC server metrics' interceptors. Pass them to
// grpc.NewServer before any other interceptor, so that calls refused by
// later ones (auth, limits) are counted with their codes too.
func (m *Metrics) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(m.grpc.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(m.grpc.StreamServerInterceptor()),
	}
}

// InitializeGRPC creates the series of every method registered on s at
// zero, so that rates exist before the first call. Call it once the
// services are registered.
func (m *Metrics) InitializeGRPC(s *grpc.Server) { m.grpc.InitializeMetrics(s) }

// Applied counts what an applied entry did. It is meant for the raft
// adapter's sink: it runs on raft's FSM goroutine after every entry, in log
// order, on every node (so every node counts the same events).
func (m *Metrics) Applied(index uint64, ap fsm.Applied) {
	m.rec.applied(ap)
	m.latency.applied(ap)
}

// Replica is what the replica metrics read from the node's Raft member.
type Replica interface {
	Diverged() error
	CheckpointsVerified() uint64
	AppliedHash() (index uint64, hash [32]byte, known bool)
}

// Replica registers the replica's health: lockcluster_replica_diverged (1
// once a checkpoint showed this node's applied history differs from the
// leader's: it then serves nothing), lockcluster_checkpoints_verified_total
// and lockcluster_applied_hash_index (the last entry in the applied-entry
// hash chain).
func (m *Metrics) Replica(r Replica) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lockcluster_replica_diverged",
			Help: "1 when this replica found, at a checkpoint, that its applied history differs from the leader's; it then refuses every client request.",
		}, func() float64 {
			if r.Diverged() != nil {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "lockcluster_checkpoints_verified_total",
			Help: "Checkpoints of the leader's applied-entry hash that this replica compared with its own and found equal.",
		}, func() float64 { return float64(r.CheckpointsVerified()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lockcluster_applied_hash_index",
			Help: "The last log index folded into this replica's applied-entry hash (0 while its chain is not known).",
		}, func() float64 {
			i, _, known := r.AppliedHash()
			if !known {
				return 0
			}
			return float64(i)
		}),
	)
}

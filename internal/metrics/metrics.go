// Package metrics exposes what a lockcluster node measures, in the
// Prometheus text format, on the node's HTTP port (/metrics):
//
//   - raft's and its log store's own metrics (lockcluster_raft_*, the
//     store's lockcluster_raft_wal_*), which hashicorp/raft and raft-wal emit
//     through hashicorp/go-metrics when built with the tag
//     hashicorpmetrics, collected by go-metrics' Prometheus sink;
//   - gRPC server metrics per method (grpc_server_*), with handling-time
//     histograms;
//   - the lock manager's sessions, held locks and pending requests per
//     namespace, and its applied index, read at scrape time;
//   - counters of what applied entries did: grants, ifAvailable misses,
//     aborts, steals and session expiries;
//   - acquire and hand-off latency histograms, fed by the request handlers
//     through internal/server's Observer interface;
//   - the replica's health (diverged, checkpoints verified, hash index);
//   - the raft log's disk: the free space and size of its file system and
//     the bytes of its files (lockcluster_disk_free_bytes,
//     lockcluster_disk_size_bytes, lockcluster_log_bytes, labelled with the
//     log's directory, path);
//   - when this node last served an online backup
//     (lockcluster_last_backup_timestamp_seconds);
//   - calls refused for their credentials, by reason
//     (lockcluster_refused_calls_total), on the node the client called;
//   - the Go runtime and process collectors, and lockcluster_build_info
//     (version, revision and Go version labels, value 1).
//
// # Names
//
// This package's own metrics follow Prometheus' conventions: snake_case
// names under lockcluster_, counters ending in _total, base units (seconds)
// in the name, and the namespace (and for raft, the peer) a label, never
// part of a name. `promtool check metrics` passes for them: TestMetricsLint
// checks the lockcluster_* families of a running cluster's /metrics with
// promlint (what promtool uses) and with promtool when it is installed.
//
// raft's metrics keep the names the library gives them (documented with
// hashicorp/raft, and used by existing Consul and Nomad dashboards), only
// prefixed lockcluster_ with dots made underscores: lockcluster_raft_apply,
// lockcluster_raft_commitTime, lockcluster_raft_commitNumLogs,
// lockcluster_raft_fsm_applyBatch, lockcluster_raft_leader_dispatchLog,
// lockcluster_raft_state_leader, lockcluster_raft_verify_leader, and
// raft-wal's lockcluster_raft_wal_log_appends, ... Many are camelCase and
// raft's counters have no _total suffix, so promtool complains about them:
// the lint test leaves lockcluster_raft_* out (and logs what promtool would
// say). Per-peer raft metrics carry the peer as a label (peer_id); raft's
// legacy copies with the peer in the name are not exported (raft.go).
// TestEveryFamilyLints checks this package's families that a short cluster
// run does not fill (steals, expiries, ...).
//
// # Replicated state: aggregate with max, not sum
//
// Every node applies every entry, so every node counts the same grants,
// not-available answers, aborts, steals and expiries, and reports the same
// sessions, held locks and pending requests per namespace. These series
// carry a replica label (the node's id, WithReplica). The cluster's rate is
// any one replica's rate; across nodes take the max, which also hides a
// follower that lags or restarted:
//
//	max without (instance, replica) (rate(lockcluster_grants_total[5m]))
//	max without (instance, replica) (lockcluster_locks_held)
//
// A sum over nodes counts every event once per replica. The other choice,
// only the leader exporting them, would make a plain sum right but breaks
// rate(): the series would move from node to node at each election,
// losing the events between two scrapes and, when leadership returns to a
// node within a rate window, counting again the events it counted as a
// follower. The latency histograms, the gRPC metrics and the replica's own
// health are observed on one node each (the leader's handlers, the node
// that served the call): those sum over nodes as usual and have no replica
// label.
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
// off any client can create namespaces, and with them series). The
// counters of writes (and calls, reason credential) refused before the log
// and of session streams cut, per namespace
// (lockcluster_namespace_refusals_total, lockcluster_stream_cuts_total:
// counted on the node that decided, sum them over nodes), name at most 100
// namespaces, each with live sessions when first counted; the rest count
// under namespace "" (limits.go). The session expiries
// (lockcluster_session_expiries_total) name at most 100 namespaces too, in
// the order this node applied their first expiry: nodes that applied the
// same log name the same ones (a node restarted since may name others
// once past 100).
//
// This package is implementation, not API: it makes no compatibility
// promise, and it exports only what other lockcluster packages use. The
// stable API is the client (package lockcluster) and the wire contract
// (api/lockclusterv1).
package metrics

import (
	"net/http"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/lockcluster/lockcluster/fsm"
)

// Metrics holds one node's metrics. Feed it every applied entry (Applied)
// and the request handlers' timings (internal/server's Observer); serve Handler
// on /metrics.
type Metrics struct {
	reg     *prometheus.Registry
	grpc    *grpcprom.ServerMetrics
	rec     *recorder
	latency *latency
	limits  *limitCounters
	refused *prometheus.CounterVec // refusals.go
	backup  prometheus.Gauge       // backup.go
}

// latencyBuckets cover a commit on a fast disk (about a millisecond) to
// long waits for a contended lock.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// Option configures New.
type Option func(*options)

type options struct{ replica prometheus.Labels }

// WithReplica labels the metrics of the replicated state (the event
// counters and the per-namespace gauges) replica=id, the node's id: every
// node reports the same values for them (see the package doc).
func WithReplica(id string) Option {
	return func(o *options) {
		if id != "" {
			o.replica = prometheus.Labels{"replica": id}
		}
	}
}

// New returns the metrics of the node whose lock manager is m, on a registry
// of their own. The first call in a process also installs go-metrics'
// global sink, so call it before the node's raft starts.
func New(m State, opts ...Option) *Metrics {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	reg := prometheus.NewRegistry()
	gm := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramBuckets(latencyBuckets)))
	rec := newRecorder(m, o.replica)
	lat := newLatency(rec)
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		raftCollector(),
		gm,
		newStateCollector(m, o.replica),
		buildInfo(),
	)
	rec.register(reg)
	lat.register(reg)
	lim := newLimitCounters(m)
	lim.register(reg)
	refused := newRefused()
	backup := newBackupGauge()
	reg.MustRegister(refused, backup)
	return &Metrics{reg: reg, grpc: gm, rec: rec, latency: lat, refused: refused, limits: lim, backup: backup}
}

// registry is the node's registry, for tests.
func (m *Metrics) registry() *prometheus.Registry { return m.reg }

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

// CallInterceptor is the unary metrics interceptor alone, for the calls
// that arrive on session streams: they are counted under their unary
// method's name.
func (m *Metrics) CallInterceptor() grpc.UnaryServerInterceptor {
	return m.grpc.UnaryServerInterceptor()
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

// ReplicaHealth is what the replica-health gauges read of this node's
// raft member (*raftnode.Node): its fences, apply lag and checkpoints, and
// its log's disk (disk.go).
type ReplicaHealth interface {
	Diverged() error
	FenceReasons() map[string]bool
	ApplyLag() time.Duration
	CheckpointsVerified() uint64
	AppliedHash() (index uint64, hash [32]byte, known bool)
	LogDir() string
	LogBytes() uint64
	DiskSpace() (free, total uint64, known bool)
}

// Health registers the gauges of the replica's health:
// lockcluster_replica_diverged (1 once a checkpoint showed this node's
// applied history differs from the leader's: it then serves nothing),
// lockcluster_checkpoints_verified_total, lockcluster_applied_hash_index
// (the last entry in the applied-entry hash chain) and
// lockcluster_replica_fenced{reason} (1 while that fence keeps the node
// from serving: diverged, damaged, storage, behind), and those of the
// log's disk (disk.go).
func (m *Metrics) Health(r ReplicaHealth) {
	m.reg.MustRegister(newDiskCollector(r))
	for _, reason := range []string{"diverged", "damaged", "storage", "behind"} {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "lockcluster_replica_fenced",
			Help:        "1 while this node refuses clients for the reason named: diverged (a checkpoint found its applied history differs), damaged (its log or term/vote store was found corrupted or truncated; until repaired from the leader), storage (its disk takes no writes), behind (it does not apply what the leader committed).",
			ConstLabels: prometheus.Labels{"reason": reason},
		}, func() float64 {
			if r.FenceReasons()[reason] {
				return 1
			}
			return 0
		}))
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lockcluster_replica_apply_lag_seconds",
			Help: "How long ago the leader announced the oldest commit index this node has not applied yet (0 when it is caught up); at 5s the node is fenced as behind.",
		}, func() float64 { return r.ApplyLag().Seconds() }),
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

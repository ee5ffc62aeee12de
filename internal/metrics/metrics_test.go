package metrics

import (
	"strings"
	"testing"
	"time"

	gometrics "github.com/hashicorp/go-metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/lockcluster/lockcluster/fsm"
)

// machine applies entries to a lock manager and feeds them to metrics, as
// the raft adapter's sink does.
type machine struct {
	t     *testing.T
	m     *fsm.Machine
	met   *Metrics
	index uint64
}

func newMachine(t *testing.T) *machine {
	m := fsm.New()
	return &machine{t: t, m: m, met: New(m)}
}

func (h *machine) apply(cmd fsm.Command) fsm.Applied {
	h.t.Helper()
	h.index++
	ap := h.m.Apply(h.index, fsm.Entry{Time: time.Now().UnixNano(), Cmd: cmd})
	if ap.Result.Err != nil {
		h.t.Fatalf("entry %d (%T): %v", h.index, cmd, ap.Result.Err)
	}
	h.met.Applied(h.index, ap)
	return ap
}

func (h *machine) open(ns string) uint64 {
	h.t.Helper()
	return h.apply(&fsm.OpenSession{Namespace: ns, Label: "test", TTL: int64(10 * time.Second)}).Result.Session
}

func counter(t *testing.T, c *prometheus.CounterVec, labels ...string) float64 {
	t.Helper()
	return testutil.ToFloat64(c.WithLabelValues(labels...))
}

func samples(t *testing.T, h *prometheus.HistogramVec, ns string) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.WithLabelValues(ns).(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

func TestCounters(t *testing.T) {
	h := newMachine(t)
	rec := h.met.rec
	a, b := h.open("billing"), h.open("billing")
	c, d := h.open("other"), h.open("other")

	h.apply(&fsm.Request{Session: a, Namespace: "billing", RequestID: 1, Names: []string{"x"}}) // granted
	h.apply(&fsm.Request{Session: b, Namespace: "billing", RequestID: 1, Names: []string{"x"}}) // queued
	h.apply(&fsm.Release{Session: a, Namespace: "billing", RequestID: 1})                       // b granted
	h.apply(&fsm.Request{Session: a, Namespace: "billing", RequestID: 2, Names: []string{"x"}, Signal: true})
	h.apply(&fsm.Abort{Session: a, Namespace: "billing", RequestID: 2, Reason: "bored"})

	h.apply(&fsm.Request{Session: c, Namespace: "other", RequestID: 1, Names: []string{"y"}, Mode: fsm.Shared})
	h.apply(&fsm.Request{Session: d, Namespace: "other", RequestID: 1, Names: []string{"y"}, IfAvailable: true}) // not available
	h.apply(&fsm.Request{Session: d, Namespace: "other", RequestID: 2, Names: []string{"y"}, Steal: true})       // c loses y

	// b holds x; a waits for it; b expires: a's grant, b's lock lost.
	h.apply(&fsm.Request{Session: a, Namespace: "billing", RequestID: 3, Names: []string{"x"}})
	h.apply(&fsm.Request{Session: b, Namespace: "billing", RequestID: 2, Names: []string{"z"}})
	h.apply(&fsm.Request{Session: a, Namespace: "billing", RequestID: 4, Names: []string{"z"}}) // queued behind b
	h.apply(&fsm.ExpireSession{Session: b})                                                     // a gets x and z
	h.apply(&fsm.CloseSession{Session: c, Namespace: "other"})

	for _, tc := range []struct {
		c      *prometheus.CounterVec
		labels []string
		want   float64
	}{
		{rec.grants, []string{"billing"}, 5}, // a x, b x, b z, a x, a z
		{rec.grants, []string{"other"}, 2},
		{rec.notAvailable, []string{"other"}, 1},
		{rec.notAvailable, []string{"billing"}, 0},
		{rec.aborts, []string{"billing", "aborted"}, 1},
		{rec.steals, []string{"other"}, 1},
		{rec.steals, []string{"billing"}, 0},
		{rec.expiries, []string{"billing"}, 1},
		{rec.expiries, []string{"other"}, 0},
	} {
		if got := counter(t, tc.c, tc.labels...); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.labels, got, tc.want)
		}
	}
	if len(rec.ns) != 2 { // a and d are open
		t.Errorf("the recorder remembers %d sessions, want 2: %v", len(rec.ns), rec.ns)
	}

	// A session ended by the first entry this recorder sees counts under "".
	h2 := newMachine(t)
	s := h2.m.Apply(1, fsm.Entry{Cmd: &fsm.OpenSession{Namespace: "n", TTL: int64(time.Second)}}).Result.Session
	h2.m.Apply(2, fsm.Entry{Cmd: &fsm.Request{Session: s, Namespace: "n", RequestID: 1, Names: []string{"q"}}})
	h2.index = 2
	h2.apply(&fsm.ExpireSession{Session: s})
	if got := counter(t, h2.met.rec.expiries, ""); got != 1 {
		t.Errorf("expiry of an unseen session: %v under namespace \"\", want 1", got)
	}
}

func TestState(t *testing.T) {
	h := newMachine(t)
	a, b := h.open("billing"), h.open("billing")
	h.open("other")
	h.apply(&fsm.Request{Session: a, Namespace: "billing", RequestID: 1, Names: []string{"x", "y"}})
	h.apply(&fsm.Request{Session: b, Namespace: "billing", RequestID: 1, Names: []string{"x"}})
	want := `
# HELP lockcluster_locks_held Held locks (granted requests; a scope counts once), per namespace.
# TYPE lockcluster_locks_held gauge
lockcluster_locks_held{namespace="billing"} 1
lockcluster_locks_held{namespace="other"} 0
# HELP lockcluster_requests_pending Requests waiting in the queues, per namespace.
# TYPE lockcluster_requests_pending gauge
lockcluster_requests_pending{namespace="billing"} 1
lockcluster_requests_pending{namespace="other"} 0
# HELP lockcluster_sessions Open sessions, per namespace.
# TYPE lockcluster_sessions gauge
lockcluster_sessions{namespace="billing"} 2
lockcluster_sessions{namespace="other"} 1
# HELP lockcluster_applied_index Raft index of the last entry the lock manager applied on this node.
# TYPE lockcluster_applied_index gauge
lockcluster_applied_index 5
`
	if err := testutil.GatherAndCompare(h.met.registry(), strings.NewReader(want),
		"lockcluster_locks_held", "lockcluster_requests_pending", "lockcluster_sessions", "lockcluster_applied_index"); err != nil {
		t.Error(err)
	}
}

func TestLatency(t *testing.T) {
	h := newMachine(t)
	lat := h.met.latency
	a, b, c := h.open("ns"), h.open("ns"), h.open("ns")
	start := time.Now().Add(-50 * time.Millisecond)

	// Granted at once: observed at once.
	ap := h.apply(&fsm.Request{Session: a, Namespace: "ns", RequestID: 1, Names: []string{"x"}})
	h.met.Requested("ns", a, 1, start, ap.Result)
	h.met.Requested("ns", a, 1, start, fsm.Result{Status: fsm.StatusGranted, Duplicate: true}) // a retry
	if n := samples(t, lat.acquire, "ns"); n != 1 {
		t.Fatalf("acquire samples after a grant: %d, want 1", n)
	}

	// Queued: observed when the release hands the lock on, and the release
	// observes a hand-off.
	ap = h.apply(&fsm.Request{Session: b, Namespace: "ns", RequestID: 1, Names: []string{"x"}})
	h.met.Requested("ns", b, 1, start, ap.Result)
	if n := samples(t, lat.acquire, "ns"); n != 1 {
		t.Fatalf("acquire samples while queued: %d, want 1", n)
	}
	ap = h.apply(&fsm.Release{Session: a, Namespace: "ns", RequestID: 1})
	h.met.Freed(start, ap)
	if n := samples(t, lat.acquire, "ns"); n != 2 {
		t.Fatalf("acquire samples after the hand-off: %d, want 2", n)
	}
	if n := samples(t, lat.handoff, "ns"); n != 1 {
		t.Fatalf("hand-off samples: %d, want 1", n)
	}
	var m dto.Metric
	_ = lat.acquire.WithLabelValues("ns").(prometheus.Histogram).Write(&m)
	if s := m.GetHistogram().GetSampleSum(); s < 0.1 {
		t.Errorf("acquire latency sum %v, want at least 2×50ms", s)
	}

	// Queued, and granted before the handler reports it (raft answers a
	// batch's proposers after applying all of it): still observed once.
	ap = h.apply(&fsm.Request{Session: c, Namespace: "ns", RequestID: 1, Names: []string{"x"}})
	rel := h.apply(&fsm.Release{Session: b, Namespace: "ns", RequestID: 1})
	h.met.Requested("ns", c, 1, start, ap.Result)
	h.met.Freed(start, rel)
	if n := samples(t, lat.acquire, "ns"); n != 3 {
		t.Fatalf("acquire samples after an early grant: %d, want 3", n)
	}

	// Queued then aborted: never observed, not kept.
	ap = h.apply(&fsm.Request{Session: a, Namespace: "ns", RequestID: 2, Names: []string{"x"}, Signal: true})
	h.met.Requested("ns", a, 2, start, ap.Result)
	if len(lat.waiting) != 1 {
		t.Fatalf("waiting: %v", lat.waiting)
	}
	ap = h.apply(&fsm.Abort{Session: a, Namespace: "ns", RequestID: 2})
	h.met.Freed(start, ap) // frees nothing: no hand-off
	// Queued, then its session ends.
	ap = h.apply(&fsm.Request{Session: b, Namespace: "ns", RequestID: 2, Names: []string{"x"}})
	h.met.Requested("ns", b, 2, start, ap.Result)
	h.met.Freed(start, h.apply(&fsm.CloseSession{Session: b, Namespace: "ns"}))
	if n := samples(t, lat.acquire, "ns"); n != 3 {
		t.Errorf("acquire samples after aborts: %d, want 3", n)
	}
	if n := samples(t, lat.handoff, "ns"); n != 2 {
		t.Errorf("hand-off samples: %d, want 2", n)
	}
	if len(lat.waiting) != 0 {
		t.Errorf("still waiting: %v", lat.waiting)
	}
}

// Several nodes in one process: each New gets its own registry, and all of
// them show the one go-metrics sink raft emits to.
func TestRaftSinkShared(t *testing.T) {
	m1, m2 := New(fsm.New()), New(fsm.New())
	if raftCollector() != raftCollector() {
		t.Fatal("two raft sinks")
	}
	gometrics.IncrCounter([]string{"raft", "test", "ping"}, 1)
	for _, m := range []*Metrics{m1, m2} {
		if n, err := testutil.GatherAndCount(m.registry(), "lockcluster_raft_test_ping"); err != nil || n != 1 {
			t.Errorf("lockcluster_raft_test_ping: %d series, %v", n, err)
		}
	}
}

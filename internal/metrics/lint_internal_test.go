package metrics

import (
	"bytes"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lockcluster/lockcluster/fsm"
)

type fakeHealth struct{}

func (fakeHealth) Diverged() error                       { return nil }
func (fakeHealth) FenceReasons() map[string]bool         { return nil }
func (fakeHealth) ApplyLag() time.Duration               { return 0 }
func (fakeHealth) CheckpointsVerified() uint64           { return 2 }
func (fakeHealth) AppliedHash() (uint64, [32]byte, bool) { return 9, [32]byte{}, true }
func (fakeHealth) LogDir() string                        { return "/var/lib/lockcluster/wal" }
func (fakeHealth) LogBytes() uint64                      { return 64 << 20 }
func (fakeHealth) DiskSpace() (uint64, uint64, bool)     { return 1 << 30, 4 << 30, true }

// Every family this package defines, each with a series (a grant, a miss,
// an abort, a steal, an expiry, both latencies, the replica's health),
// passes promlint and, when it is installed, `promtool check metrics`.
// TestMetricsLint checks a running cluster's /metrics; this one sees the
// families that cluster did not use.
func TestEveryFamilyLints(t *testing.T) {
	m := fsm.New()
	h := &machine{t: t, m: m, met: New(m, WithReplica("n1"))}
	h.met.Health(fakeHealth{})
	a, b := h.open("ns"), h.open("ns")
	start := time.Now().Add(-time.Millisecond)
	ap := h.apply(&fsm.Request{Session: a, Namespace: "ns", RequestID: 1, Names: []string{"x"}})
	h.met.Requested("ns", a, 1, start, ap.Result)
	ap = h.apply(&fsm.Request{Session: b, Namespace: "ns", RequestID: 1, Names: []string{"x"}})
	h.met.Requested("ns", b, 1, start, ap.Result)
	h.met.Freed(start, h.apply(&fsm.Release{Session: a, Namespace: "ns", RequestID: 1})) // b granted: a hand-off
	h.apply(&fsm.Request{Session: a, Namespace: "ns", RequestID: 2, Names: []string{"x"}, IfAvailable: true})
	h.apply(&fsm.Request{Session: a, Namespace: "ns", RequestID: 3, Names: []string{"x"}, Signal: true})
	h.apply(&fsm.Abort{Session: a, Namespace: "ns", RequestID: 3})
	h.apply(&fsm.Request{Session: a, Namespace: "ns", RequestID: 4, Names: []string{"x"}, Steal: true})
	h.apply(&fsm.ExpireSession{Session: b})
	h.met.Refused("no_credential")
	h.met.LimitRefused("ns", "credential")
	h.met.StreamCut("ns")
	h.met.BackupSaved(time.Now())

	var own []string
	fams, err := h.met.registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if n := f.GetName(); strings.HasPrefix(n, "lockcluster_") && !strings.HasPrefix(n, "lockcluster_raft_") {
			own = append(own, n)
		}
	}
	for _, want := range []string{"lockcluster_grants_total", "lockcluster_not_available_total", "lockcluster_aborts_total", "lockcluster_steals_total",
		"lockcluster_session_expiries_total", "lockcluster_acquire_seconds", "lockcluster_handoff_seconds", "lockcluster_sessions",
		"lockcluster_replica_diverged", "lockcluster_checkpoints_verified_total", "lockcluster_refused_calls_total",
		"lockcluster_namespace_refusals_total", "lockcluster_stream_cuts_total", "lockcluster_last_backup_timestamp_seconds",
		"lockcluster_disk_free_bytes", "lockcluster_disk_size_bytes", "lockcluster_log_bytes"} {
		if !strings.Contains(" "+strings.Join(own, " ")+" ", " "+want+" ") {
			t.Errorf("no %s among %v", want, own)
		}
	}
	problems, err := testutil.GatherAndLint(h.met.registry(), own...)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}

	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool is not installed (apt-get install prometheus): CI must run it")
		}
		t.Skip("promtool is not installed: promlint only")
	}
	rec := httptest.NewRecorder()
	h.met.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	var text strings.Builder
	for _, l := range strings.Split(string(body), "\n") {
		if m := lineName(l); m != "" && strings.HasPrefix(m, "lockcluster_") && !strings.HasPrefix(m, "lockcluster_raft_") {
			text.WriteString(l + "\n")
		}
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = strings.NewReader(text.String())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || out.Len() > 0 {
		t.Errorf("promtool check metrics: %v\n%s\n%s", err, out.String(), text.String())
	}
}

// lineName is the metric a line of the text format is about ("" if none).
func lineName(l string) string {
	l = strings.TrimPrefix(strings.TrimPrefix(l, "# HELP "), "# TYPE ")
	if l == "" || l[0] == '#' {
		return ""
	}
	if i := strings.IndexAny(l, "{ "); i > 0 {
		return l[:i]
	}
	return l
}

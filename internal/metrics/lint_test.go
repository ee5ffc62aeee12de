package metrics_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
)

// metricName is the name a line of the text format is about: a sample's,
// or a HELP or TYPE comment's.
var metricName = regexp.MustCompile(`^(?:# (?:HELP|TYPE) )?([a-zA-Z_:][a-zA-Z0-9_:]*)`)

// only keeps the lines of a /metrics answer whose metric name keep accepts.
func only(text string, keep func(name string) bool) string {
	var b strings.Builder
	for _, l := range strings.Split(text, "\n") {
		if m := metricName.FindStringSubmatch(l); m != nil && keep(m[1]) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func ours(name string) bool {
	return strings.HasPrefix(name, "lockcluster_") && !strings.HasPrefix(name, "lockcluster_raft_")
}

// The project's own metrics (lockcluster_*, raft's lockcluster_raft_* left
// out: the library names those) pass Prometheus' lint, promlint, and
// `promtool check metrics` when it is installed (CI installs it); no metric
// name holds a node id or a namespace (those are labels); and the metrics
// of the replicated state carry a replica label and agree across the
// nodes, so that max over replicas is the cluster's value (package doc).
func TestMetricsLint(t *testing.T) {
	c := nodetest.Start(t, 3, nodetest.Options{Quiet: true})
	c.WaitLeader(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := lockcluster.Dial(ctx, c.Addrs(), lockcluster.WithNamespace("billing"), lockcluster.WithLabel("lint"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close(context.Background())
	for _, name := range []string{"a", "b", "c"} {
		l, err := cl.Acquire(ctx, name, lockcluster.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	scrape := func(i int) string {
		t.Helper()
		resp, err := http.Get("http://" + c.Nodes[i].HTTPAddr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("node %d: GET /metrics: %s, %v", i, resp.Status, err)
		}
		return string(body)
	}
	// Every node counts the same 3 grants (the counters are replicated).
	grants := regexp.MustCompile(`(?m)^lockcluster_grants_total\{namespace="billing",replica="(node\d)"\} 3$`)
	c.WaitFor(10*time.Second, "every node to count the 3 grants", func() bool {
		for i := range c.Nodes {
			if m := grants.FindStringSubmatch(scrape(i)); m == nil || m[1] != c.Nodes[i].ID() {
				return false
			}
		}
		return true
	})

	latency := false // observed on the leader only
	for i, n := range c.Nodes {
		text := scrape(i)
		own := only(text, ours)
		if !strings.Contains(own, "lockcluster_grants_total") || !strings.Contains(own, "lockcluster_applied_index") {
			t.Fatalf("node %d: the lockcluster_* families are missing:\n%s", i, own)
		}
		latency = latency || strings.Contains(own, "lockcluster_acquire_seconds_bucket")
		problems, err := promlint.New(strings.NewReader(own)).Lint()
		if err != nil {
			t.Fatalf("node %d: promlint cannot read /metrics: %v", i, err)
		}
		for _, p := range problems {
			t.Errorf("node %d: promlint: %s: %s", i, p.Metric, p.Text)
		}
		if path, err := exec.LookPath("promtool"); err == nil {
			cmd := exec.Command(path, "check", "metrics")
			cmd.Stdin = strings.NewReader(own)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil || out.Len() > 0 {
				t.Errorf("node %d: promtool check metrics: %v\n%s", i, err, out.String())
			}
		} else if i == 0 && os.Getenv("CI") != "" {
			t.Error("promtool is not installed (apt-get install prometheus): CI must run it")
		} else if i == 0 {
			t.Log("promtool is not installed: promlint only")
		}
		// Ids and namespaces are labels, never part of a name, raft's
		// included.
		for _, l := range strings.Split(text, "\n") {
			m := metricName.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			for _, word := range []string{"billing", n.ID(), c.Nodes[(i+1)%3].ID()} {
				if strings.Contains(m[1], word) {
					t.Errorf("node %d: metric name %s holds %q: it should be a label", i, m[1], word)
				}
			}
		}
		// The replicated state's series carry replica; what one node
		// observes alone (latency, gRPC) does not.
		for _, l := range strings.Split(own, "\n") {
			m := metricName.FindStringSubmatch(l)
			if m == nil || strings.HasPrefix(l, "#") {
				continue
			}
			replicated := false
			for _, f := range []string{"lockcluster_grants_total", "lockcluster_not_available_total", "lockcluster_aborts_total", "lockcluster_steals_total",
				"lockcluster_session_expiries_total", "lockcluster_sessions", "lockcluster_locks_held", "lockcluster_requests_pending"} {
				replicated = replicated || m[1] == f
			}
			if has := strings.Contains(l, `replica="`+n.ID()+`"`); has != replicated {
				t.Errorf("node %d: %s: replica label %v, want %v", i, l, has, replicated)
			}
		}
		if i == 0 {
			// raft's own names, which the lint leaves out: logged.
			raft := only(text, func(name string) bool { return strings.HasPrefix(name, "lockcluster_raft_") })
			if problems, err := promlint.New(strings.NewReader(raft)).Lint(); err == nil {
				for _, p := range problems {
					t.Logf("raft's own (left out): %s: %s", p.Metric, p.Text)
				}
			}
		}
	}
	if !latency {
		t.Error("no node exports lockcluster_acquire_seconds: the lint did not see the histograms")
	}
}

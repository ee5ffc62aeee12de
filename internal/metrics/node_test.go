package metrics_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
)

// /metrics of a real node, with a held lock and a pending request.
func TestNodeMetrics(t *testing.T) {
	c := nodetest.Start(t, 1, nodetest.Options{Quiet: true})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	dial := func(label string) *lockcluster.Client {
		cl, err := lockcluster.Dial(ctx, c.Addrs(), lockcluster.WithNamespace("billing"), lockcluster.WithLabel(label))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close(context.Background()) })
		return cl
	}
	a, b := dial("alpha"), dial("beta")
	// One lock handed from a to b, for the latency histograms.
	first, err := a.Acquire(ctx, "handoff", lockcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	next := make(chan error, 1)
	go func() {
		l, err := b.Acquire(ctx, "handoff", lockcluster.Options{})
		if err == nil {
			err = l.Release(ctx)
		}
		next <- err
	}()
	c.WaitFor(5*time.Second, "b to queue", func() bool { return len(c.Nodes[0].Machine().Query("billing").Pending) == 1 })
	first.Release(ctx)
	if err := <-next; err != nil {
		t.Fatal(err)
	}
	if _, err := a.Acquire(ctx, "invoices", lockcluster.Options{}); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go func() { _, _ = b.Acquire(wctx, "invoices", lockcluster.Options{}) }()
	m := c.Nodes[0].Machine()
	c.WaitFor(5*time.Second, "a pending request", func() bool { return len(m.Query("billing").Pending) == 1 })

	resp, err := http.Get("http://" + c.Nodes[0].HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %s, Content-Type %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	text := string(body)
	for _, want := range []string{
		`lockcluster_sessions{namespace="billing",replica="node0"} 2`,
		`lockcluster_locks_held{namespace="billing",replica="node0"} 1`,
		`lockcluster_requests_pending{namespace="billing",replica="node0"} 1`,
		`lockcluster_grants_total{namespace="billing",replica="node0"} 3`,
		`lockcluster_acquire_seconds_count{namespace="billing"} 3`,
		`lockcluster_handoff_seconds_count{namespace="billing"} 1`,
		`grpc_server_handled_total{grpc_code="OK",grpc_method="OpenSession",grpc_service="lockcluster.v1.Locks",grpc_type="unary"}`,
		`grpc_server_handling_seconds_bucket{grpc_method="Request",grpc_service="lockcluster.v1.Locks",grpc_type="unary",le="0.01"}`,
		`grpc_server_started_total{grpc_method="Session",grpc_service="lockcluster.v1.Locks",grpc_type="bidi_stream"}`,
		`lockcluster_applied_index `,
		`lockcluster_log_bytes{path="`,
		`lockcluster_disk_free_bytes{path="`,
		`lockcluster_last_backup_timestamp_seconds 0`,
		`go_goroutines `,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	// raft's own, through go-metrics (build tag hashicorpmetrics).
	// raft-wal's (the log store) through the same sink.
	for _, re := range []string{`(?m)^lockcluster_raft_state_leader `, `(?m)^lockcluster_raft_wal_log_appends`, `(?m)^lockcluster_raft_commitTime`} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("/metrics has no %s (built without -tags hashicorpmetrics?)", re)
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Log(text)
	}
}

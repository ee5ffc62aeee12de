package metrics

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Refusals and stream cuts are counted per namespace and reason, and the
// namespaces they name are bounded: only namespaces with live sessions,
// and only the first maxLimitNamespaces of them, get a label of their own;
// the rest count under "". The families pass promlint.
func TestLimitRefusalsBoundTheirNamespaces(t *testing.T) {
	h := newMachine(t)
	h.open("tenant")
	h.met.LimitRefused("tenant", "bytes_rate")
	h.met.LimitRefused("tenant", "bytes_rate")
	h.met.LimitRefused("tenant", "rate")
	h.met.StreamCut("tenant")
	if got := counter(t, h.met.limits.refusals, "tenant", "bytes_rate"); got != 2 {
		t.Errorf("tenant bytes_rate: %v, want 2", got)
	}
	if got := counter(t, h.met.limits.refusals, "tenant", "rate"); got != 1 {
		t.Errorf("tenant rate: %v, want 1", got)
	}
	if got := counter(t, h.met.limits.cut, "tenant"); got != 1 {
		t.Errorf("tenant cuts: %v, want 1", got)
	}
	// Namespaces a caller made up, with no session: no series of their own.
	for i := range 1000 {
		h.met.LimitRefused(fmt.Sprintf("made-up-%d", i), "session_secret")
	}
	if got := counter(t, h.met.limits.refusals, "", "session_secret"); got != 1000 {
		t.Errorf("refusals in namespaces without sessions, under \"\": %v, want 1000", got)
	}
	// Namespaces with sessions, past the bound: under "".
	for i := range maxLimitNamespaces + 50 {
		ns := fmt.Sprintf("ns-%d", i)
		h.open(ns)
		h.met.LimitRefused(ns, "rate")
	}
	// tenant's two reasons, 99 more namespaces, and "" for each of two
	// reasons: 1,150 namespaces make 103 series.
	if n := testutil.CollectAndCount(h.met.limits.refusals); n != maxLimitNamespaces+3 {
		t.Errorf("%d series of refusals, want %d", n, maxLimitNamespaces+3)
	}
	if got := counter(t, h.met.limits.refusals, "", "rate"); got != 51 {
		t.Errorf("refusals past the bound under \"\": %v, want 51", got)
	}
	// A namespace named once keeps its series.
	h.met.LimitRefused("tenant", "rate")
	if got := counter(t, h.met.limits.refusals, "tenant", "rate"); got != 2 {
		t.Errorf("tenant rate after the bound: %v, want 2", got)
	}
	problems, err := testutil.GatherAndLint(h.met.registry(), "lockcluster_namespace_refusals_total", "lockcluster_stream_cuts_total")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPerSecondWindow(t *testing.T) {
	var p perSecond
	for _, at := range []time.Duration{100 * time.Millisecond, 900 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second, 3200 * time.Millisecond, 3300 * time.Millisecond} {
		p.add(at)
	}
	for _, c := range []struct {
		from, to    time.Duration
		total, peak int64
	}{
		{0, 10 * time.Second, 6, 3},
		{time.Second, 2 * time.Second, 1, 1},
		{2 * time.Second, 2 * time.Second, 0, 0},
		{500 * time.Millisecond, 500 * time.Millisecond, 2, 2}, // the whole second of from
		{20 * time.Second, 30 * time.Second, 0, 0},
	} {
		if total, peak := p.window(c.from, c.to); total != c.total || peak != c.peak {
			t.Errorf("window(%s, %s) = %d, %d; want %d, %d", c.from, c.to, total, peak, c.total, c.peak)
		}
	}
}

// raftCounters sums the election counters of a /metrics page, with or
// without the lockcluster_ prefix, and ignores the rest.
func TestRaftCounters(t *testing.T) {
	page := `# TYPE lockcluster_raft_state_leader counter
lockcluster_raft_state_leader 3
lockcluster_raft_state_candidate{x="a"} 2
lockcluster_raft_state_candidate{x="b"} 1
raft_transition_leader_lease_timeout 4
lockcluster_raft_state_follower 9
lockcluster_raft_state_leader_total 100
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, page) }))
	defer srv.Close()
	got := raftCounters(context.Background(), strings.TrimPrefix(srv.URL, "http://"))
	want := map[string]float64{"raft_state_leader": 3, "raft_state_candidate": 3, "raft_transition_leader_lease_timeout": 4}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestCountLogLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node0.log")
	before := "level=WARN msg=\"failed to contact quorum of nodes, stepping down\"\n"
	after := before + "level=WARN msg=\"heartbeat timeout reached, starting election\"\n" + "level=INFO msg=other\n" +
		"level=WARN msg=\"new leader elected, stepping down\"\n"
	if err := os.WriteFile(path, []byte(after), 0o644); err != nil {
		t.Fatal(err)
	}
	if down, timeouts := countLogLines(path, int64(len(before))); down != 1 || timeouts != 1 {
		t.Errorf("after the offset: %d step-downs, %d timeouts; want 1 and 1", down, timeouts)
	}
	if down, _ := countLogLines(path, 0); down != 2 {
		t.Errorf("from the start: %d step-downs, want 2", down)
	}
}

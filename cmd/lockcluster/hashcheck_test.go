package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster/internal/proccluster"
)

// Every node keeps a chained hash of every log entry it applied and serves
// it at GET /debug/digest (applied_index, applied_hash; ?at=N for the hash
// at exactly N). Nodes that applied the same entries agree at every index
// they share; a replica that ever applied another entry never agrees
// again. The process clusters of these tests compare them when the test
// ends, so every multi-node test here checks that its replicas never
// diverged.

// compareAppliedHashes compares the running hashes of the nodes at the
// HTTP addresses given (proccluster.CompareAppliedHashes, waiting up to
// catchUp for them to reach the same applied index; with auth on,
// /debug/digest needs the admin credential: the clusters of these tests
// that have auth use adminToken, and without auth it is ignored). It
// returns what differs, or a node that says it fenced itself, or a node
// that does not report the running hash ("" if nothing). A node that
// cannot be read (stopped, paused), or cannot give its hash at the index
// (restored from a snapshot without one), is not compared; the returned
// notes say so.
func compareAppliedHashes(addrs []string, catchUp time.Duration) (problem string, notes []string) {
	ctx, cancel := context.WithTimeout(context.Background(), catchUp+10*time.Second)
	defer cancel()
	h := proccluster.CompareAppliedHashes(ctx, addrs, adminToken, catchUp, 20*time.Millisecond)
	var problems []string
	hashed := 0
	for _, n := range h.Nodes {
		switch {
		case n.Err != nil:
			notes = append(notes, fmt.Sprintf("%s: %v", n.Addr, n.Err))
			continue
		case !n.Reports():
			problems = append(problems, fmt.Sprintf("%s (%s) does not report applied_index: a lockcluster without the running hash", n.Last.ID, n.Addr))
			continue
		case n.Last.Diverged != "":
			problems = append(problems, fmt.Sprintf("%s fenced itself: %s", n.Last.ID, n.Last.Diverged))
		}
		switch {
		case n.AtErr != nil:
			notes = append(notes, fmt.Sprintf("%s: %v", n.Addr, n.AtErr))
		case !n.Hashed(h.At):
			notes = append(notes, fmt.Sprintf("%s has no hash at index %d: %s", n.Last.ID, h.At, n.At.AtError))
		default:
			hashed++
		}
	}
	if h.Differ() {
		problems = append([]string{fmt.Sprintf("the nodes applied different entries: their hashes through index %d differ: %s",
			h.At, h.Hashes(", "))}, problems...)
	} else if hashed > 0 {
		notes = append(notes, fmt.Sprintf("compared at index %d: %s", h.At, h.Hashes(", ")))
	}
	return strings.Join(problems, "; "), notes
}

// checkAppliedHashes fails t if the nodes at addrs ever diverged.
func checkAppliedHashes(t *testing.T, addrs []string) {
	t.Helper()
	problem, notes := compareAppliedHashes(addrs, 3*time.Second)
	for _, n := range notes {
		t.Logf("applied hashes: %s", n)
	}
	if problem != "" {
		t.Errorf("%s", problem)
	}
}

// fakeDigest serves /debug/digest with applied index 10 and the hash at
// every index from hashes ("" for none); old: without the running hash.
func fakeDigest(t *testing.T, tlsToo bool, id string, hashes func(at uint64) string, diverged string, old bool) string {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp := map[string]any{"id": id, "index": 10, "digest": "x", "stable": true}
		if !old {
			resp["applied_index"], resp["applied_hash"], resp["diverged"] = 10, hashes(10), diverged
			if at := r.URL.Query().Get("at"); at != "" {
				var n uint64
				fmt.Sscan(at, &n)
				resp["at_index"], resp["at_hash"] = n, hashes(n)
				if hashes(n) == "" {
					resp["at_error"] = "not remembered"
				}
			}
		}
		_ = json.NewEncoder(w).Encode(resp)
	})
	srv := httptest.NewServer(h)
	if tlsToo {
		srv.Close()
		srv = httptest.NewTLSServer(h)
	}
	t.Cleanup(srv.Close)
	_, addr, _ := strings.Cut(srv.URL, "://")
	return addr
}

func TestCompareAppliedHashes(t *testing.T) {
	same := func(at uint64) string { return fmt.Sprintf("aa%062d", at) }
	other := func(at uint64) string { return fmt.Sprintf("bb%062d", at) }
	none := func(uint64) string { return "" }
	for _, tc := range []struct {
		name    string
		addrs   []string
		problem string // "" for none
		note    string
	}{
		{"equal, one over TLS", []string{fakeDigest(t, false, "node0", same, "", false), fakeDigest(t, true, "node1", same, "", false)}, "", "compared at index 10: node0 aa0000000000, node1 aa0000000000"},
		{"differ", []string{fakeDigest(t, false, "node0", same, "", false), fakeDigest(t, false, "node1", other, "", false)}, "hashes through index 10 differ", ""},
		{"fenced", []string{fakeDigest(t, false, "node0", same, "", false), fakeDigest(t, false, "node1", same, "checkpoint 8 mismatch", false)}, "node1 fenced itself: checkpoint 8 mismatch", ""},
		{"without the running hash", []string{fakeDigest(t, false, "node0", same, "", false), fakeDigest(t, false, "node1", same, "", true)}, "node1 (", ""},
		{"not remembered", []string{fakeDigest(t, false, "node0", same, "", false), fakeDigest(t, false, "node1", none, "", false)}, "", "node1 has no hash at index 10"},
		{"stopped", []string{fakeDigest(t, false, "node0", same, "", false), "127.0.0.1:1"}, "", "127.0.0.1:1"},
	} {
		problem, notes := compareAppliedHashes(tc.addrs, 50*time.Millisecond)
		if (tc.problem == "") != (problem == "") || !strings.Contains(problem, tc.problem) {
			t.Errorf("%s: problem %q, want %q", tc.name, problem, tc.problem)
		}
		if n := strings.Join(notes, "\n"); !strings.Contains(n, tc.note) || (tc.note == "" && strings.Contains(n, "no hash")) {
			t.Errorf("%s: notes %q, want %q", tc.name, n, tc.note)
		}
	}
}

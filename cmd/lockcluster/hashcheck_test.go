package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Every node keeps a chained hash of every log entry it applied and serves
// it at GET /debug/digest (applied_index, applied_hash; ?at=N for the hash
// at exactly N). Nodes that applied the same entries agree at every index
// they share; a replica that ever applied another entry never agrees
// again. The process clusters of these tests compare them when the test
// ends, so every multi-node test here checks that its replicas never
// diverged.

// procDigest is the part of a node's /debug/digest answer compared here.
type procDigest struct {
	ID           string  `json:"id"`
	AppliedIndex *uint64 `json:"applied_index"`
	AppliedHash  string  `json:"applied_hash"`
	Diverged     string  `json:"diverged"`
	AtIndex      uint64  `json:"at_index"`
	AtHash       string  `json:"at_hash"`
	AtError      string  `json:"at_error"`
}

// digestClient reads /debug/digest over HTTP, or over HTTPS when the node
// serves TLS; the server's certificate is not verified: these are the
// test's own processes on loopback, asked for a debug value.
var digestClient = &http.Client{Timeout: 2 * time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

func getDigest(ctx context.Context, addr, query string) (procDigest, error) {
	var d procDigest
	var last error
	for _, scheme := range []string{"http", "https"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+"/debug/digest"+query, nil)
		if err != nil {
			return d, err
		}
		// With auth on, /debug/digest needs the admin credential: the
		// clusters of these tests that have auth use adminToken; without
		// auth the header is ignored.
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := digestClient.Do(req)
		if err != nil {
			last = err
			continue
		}
		err = fmt.Errorf("%s", resp.Status)
		if resp.StatusCode == http.StatusOK {
			err = json.NewDecoder(resp.Body).Decode(&d)
		}
		resp.Body.Close()
		if err == nil {
			return d, nil
		}
		last = err // a plain request to a TLS server is answered 400
	}
	return d, fmt.Errorf("GET %s/debug/digest%s: %v", addr, query, last)
}

// compareAppliedHashes compares the running hashes of the nodes at the
// HTTP addresses given: it waits up to catchUp for every node to report
// the same applied index, takes the smallest, and asks each node for its
// hash there. It returns what differs, or a node that says it fenced
// itself, or a node that does not report the running hash ("" if
// nothing). A node that cannot be read (stopped, paused), or cannot give
// its hash at the index (restored from a snapshot without one), is not
// compared; the returned notes say so.
func compareAppliedHashes(addrs []string, catchUp time.Duration) (problem string, notes []string) {
	ctx, cancel := context.WithTimeout(context.Background(), catchUp+10*time.Second)
	defer cancel()
	type node struct {
		addr string
		d    procDigest
	}
	var ns []node
	var missing []string
	deadline := time.Now().Add(catchUp)
	for {
		ns, notes, missing = ns[:0], notes[:0], missing[:0]
		for _, a := range addrs {
			d, err := getDigest(ctx, a, "")
			switch {
			case err != nil:
				notes = append(notes, fmt.Sprintf("%s: %v", a, err))
			case d.AppliedIndex == nil:
				missing = append(missing, fmt.Sprintf("%s (%s) does not report applied_index: a lockcluster without the running hash", d.ID, a))
			default:
				ns = append(ns, node{a, d})
			}
		}
		// The same index, and every chain known (a young cluster's leader
		// proposes the anchor entry that starts them after its election).
		same := true
		for _, n := range ns {
			same = same && *n.d.AppliedIndex == *ns[0].d.AppliedIndex && n.d.AppliedHash != ""
		}
		if same || !time.Now().Before(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	problems := missing
	for _, n := range ns {
		if n.d.Diverged != "" {
			problems = append(problems, fmt.Sprintf("%s fenced itself: %s", n.d.ID, n.d.Diverged))
		}
	}
	if len(ns) < 2 {
		return strings.Join(problems, "; "), notes
	}
	at := *ns[0].d.AppliedIndex
	for _, n := range ns {
		at = min(at, *n.d.AppliedIndex)
	}
	var parts []string
	hashes := map[string]bool{}
	for _, n := range ns {
		d, err := getDigest(ctx, n.addr, fmt.Sprintf("?at=%d", at))
		switch {
		case err != nil:
			notes = append(notes, fmt.Sprintf("%s: %v", n.addr, err))
		case d.AtHash == "" || d.AtIndex != at:
			notes = append(notes, fmt.Sprintf("%s has no hash at index %d: %s", d.ID, at, d.AtError))
		default:
			hashes[d.AtHash] = true
			parts = append(parts, fmt.Sprintf("%s %.12s", d.ID, d.AtHash))
		}
	}
	if len(hashes) > 1 {
		problems = append([]string{fmt.Sprintf("the nodes applied different entries: their hashes through index %d differ: %s",
			at, strings.Join(parts, ", "))}, problems...)
	} else {
		notes = append(notes, fmt.Sprintf("compared at index %d: %s", at, strings.Join(parts, ", ")))
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

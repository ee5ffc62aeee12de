package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeNode serves /debug/digest as the contract says a node does: its
// applied index advances through applied (one step per request, the last
// one stays), and it knows the hash at every index in hashes.
type fakeNode struct {
	id       string
	mu       sync.Mutex
	applied  []uint64
	hashes   map[uint64]string
	diverged string
	old      bool // a lockcluster without the running hash
	unknown  bool // its chain is unknown (restored from an old snapshot)
}

func (fn *fakeNode) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/debug/digest" {
		http.NotFound(w, r)
		return
	}
	fn.mu.Lock()
	applied := fn.applied[0]
	if len(fn.applied) > 1 {
		fn.applied = fn.applied[1:]
	}
	fn.mu.Unlock()
	resp := map[string]any{"id": fn.id, "index": applied, "digest": "d", "stable": true}
	if !fn.old {
		h := fn.hashes[applied]
		if fn.unknown {
			h = ""
		}
		resp["applied_index"], resp["applied_hash"], resp["diverged"] = applied, h, fn.diverged
		if at := r.URL.Query().Get("at"); at != "" {
			n, _ := strconv.ParseUint(at, 10, 64)
			resp["at_index"] = n
			switch h, ok := fn.hashes[n]; {
			case fn.unknown:
				resp["at_hash"], resp["at_error"] = "", "the chain is unknown: restored from a snapshot without one"
			case !ok || n > applied:
				resp["at_hash"], resp["at_error"] = "", "index "+at+" is no longer remembered"
			default:
				resp["at_hash"] = h
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// httpCluster is a Cluster whose nodes are fake HTTP servers.
type httpCluster struct {
	Cluster
	addrs []string
}

func (hc *httpCluster) Size() int             { return len(hc.addrs) }
func (hc *httpCluster) HTTPAddr(i int) string { return hc.addrs[i] }

func serveFakes(t *testing.T, nodes ...*fakeNode) *httpCluster {
	hc := &httpCluster{}
	for _, fn := range nodes {
		srv := httptest.NewServer(fn)
		t.Cleanup(srv.Close)
		hc.addrs = append(hc.addrs, strings.TrimPrefix(srv.URL, "http://"))
	}
	return hc
}

// chain is a history of hashes through index n; from index fork on they
// are another history's.
func chain(n, fork uint64) map[uint64]string {
	m := map[uint64]string{}
	for i := uint64(1); i <= n; i++ {
		h := "aaaa" + strconv.FormatUint(i, 10) + "00000000000000"
		if fork > 0 && i >= fork {
			h = "bbbb" + strconv.FormatUint(i, 10) + "00000000000000"
		}
		m[i] = h
	}
	return m
}

func compare(t *testing.T, bound time.Duration, nodes ...*fakeNode) Op {
	t.Helper()
	op := appliedHashes(context.Background(), serveFakes(t, nodes...), bound, time.Millisecond)
	if op.Process != finalProcess || op.F != "applied-hash" {
		t.Fatalf("entry %+v", op)
	}
	return op
}

func wantApplied(t *testing.T, op Op, typ, substr string) {
	t.Helper()
	if op.Type != typ || !strings.Contains(op.Value, substr) {
		t.Errorf("got %s %q, want %s containing %q", op.Type, op.Value, typ, substr)
	}
}

func TestAppliedHashesEqual(t *testing.T) {
	h := chain(100, 0)
	op := compare(t, time.Second,
		&fakeNode{id: "node0", applied: []uint64{100}, hashes: h},
		&fakeNode{id: "node1", applied: []uint64{100}, hashes: h},
		&fakeNode{id: "node2", applied: []uint64{100}, hashes: h})
	wantApplied(t, op, "ok", "equal applied hashes at index 100: node0 aaaa10000000")
}

// A node that is behind is waited for; it catches up, and the hashes are
// compared at the index all reached.
func TestAppliedHashesWaitsForCatchUp(t *testing.T) {
	h := chain(100, 0)
	op := compare(t, 10*time.Second,
		&fakeNode{id: "node0", applied: []uint64{100}, hashes: h},
		&fakeNode{id: "node1", applied: []uint64{40, 70, 99, 100}, hashes: h},
		&fakeNode{id: "node2", applied: []uint64{100}, hashes: h})
	wantApplied(t, op, "ok", "at index 100")
	if strings.Contains(op.Value, "had applied") {
		t.Errorf("says the nodes had not caught up: %s", op.Value)
	}
}

// A node that never catches up: the hashes are compared at the smallest
// applied index, and the entry says the nodes were apart.
func TestAppliedHashesAtTheSmallestIndex(t *testing.T) {
	h := chain(100, 0)
	op := compare(t, 50*time.Millisecond,
		&fakeNode{id: "node0", applied: []uint64{100}, hashes: h},
		&fakeNode{id: "node1", applied: []uint64{90}, hashes: h},
		&fakeNode{id: "node2", applied: []uint64{95}, hashes: h})
	wantApplied(t, op, "ok", "equal applied hashes at index 90")
	wantApplied(t, op, "ok", "had applied 90..100")
}

// One replica applied another entry at 60 (a stale tail): its state may
// agree again by the end, its hash never does.
func TestAppliedHashesDiffer(t *testing.T) {
	op := compare(t, time.Second,
		&fakeNode{id: "node0", applied: []uint64{100}, hashes: chain(100, 0)},
		&fakeNode{id: "node1", applied: []uint64{100}, hashes: chain(100, 60)},
		&fakeNode{id: "node2", applied: []uint64{100}, hashes: chain(100, 0)})
	wantApplied(t, op, "fail", "hashes of the entries applied through index 100 differ")
	wantApplied(t, op, "fail", "node1 bbbb10000000")
}

func TestAppliedHashesFenced(t *testing.T) {
	h := chain(100, 0)
	op := compare(t, time.Second,
		&fakeNode{id: "node0", applied: []uint64{100}, hashes: h},
		&fakeNode{id: "node1", applied: []uint64{100}, hashes: h, diverged: "checkpoint at 64: leader's hash ab12, mine cd34"},
		&fakeNode{id: "node2", applied: []uint64{100}, hashes: h})
	wantApplied(t, op, "fail", "node1 fenced itself: checkpoint at 64")
}

// Nothing to compare is a failure, never a pass: a node that no longer
// knows the hash at the index, one whose chain is unknown, one without
// the running hash at all, one that does not answer.
func TestAppliedHashesCannotCompare(t *testing.T) {
	h := chain(100, 0)
	forgot := map[uint64]string{100: h[100]}
	op := compare(t, 50*time.Millisecond,
		&fakeNode{id: "node0", applied: []uint64{100}, hashes: h},
		&fakeNode{id: "node1", applied: []uint64{90}, hashes: h},
		&fakeNode{id: "node2", applied: []uint64{100}, hashes: forgot})
	wantApplied(t, op, "fail", "node2 has no hash at index 90: index 90 is no longer remembered")

	op = compare(t, time.Second,
		&fakeNode{id: "node0", applied: []uint64{100}, hashes: h},
		&fakeNode{id: "node1", applied: []uint64{100}, hashes: h, unknown: true},
		&fakeNode{id: "node2", applied: []uint64{100}, hashes: h})
	wantApplied(t, op, "fail", "node1 has no hash at index 100: the chain is unknown")

	op = compare(t, time.Second,
		&fakeNode{id: "node0", applied: []uint64{100}, hashes: h},
		&fakeNode{id: "node1", applied: []uint64{100}, old: true},
		&fakeNode{id: "node2", applied: []uint64{100}, hashes: h})
	wantApplied(t, op, "fail", "node1 (node 1) does not report applied_index")

	hc := serveFakes(t, &fakeNode{id: "node0", applied: []uint64{100}, hashes: h})
	hc.addrs = append(hc.addrs, "127.0.0.1:1") // nothing listens there
	op = appliedHashes(context.Background(), hc, 50*time.Millisecond, time.Millisecond)
	wantApplied(t, op, "fail", "could not read every node's /debug/digest")
}

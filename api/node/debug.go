package node

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/pprof"
)

// pprofHandler serves Go's profiles (the index, cmdline, profile, symbol,
// trace and every named profile) under /debug/pprof/.
func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// digestResponse is the answer of GET /debug/digest.
type digestResponse struct {
	ID     string `json:"id"`
	Index  uint64 `json:"index"`  // the last entry applied
	Digest string `json:"digest"` // SHA-256 of the state, hex
	// Stable is false when an entry was applied while the digest was
	// computed: ask again.
	Stable bool `json:"stable"`
}

// serveDigest answers GET /debug/digest: the state machine's digest and
// the index it reflects. Nodes that applied the same entries have equal
// digests; the chaos harness (test/jepsen-lite) compares them at the end
// of a run.
func (n *Node) serveDigest(w http.ResponseWriter, r *http.Request) {
	before := n.machine.LastIndex()
	d := n.machine.Digest()
	after := n.machine.LastIndex()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(digestResponse{ID: n.cfg.ID, Index: after, Digest: hex.EncodeToString(d[:]), Stable: before == after})
}

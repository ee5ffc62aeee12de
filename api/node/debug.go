package node

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
	"strconv"
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

	// The running hash of every applied entry (raftnode's chain): nodes
	// that applied the same history agree at every common index, and a
	// node that once applied something else never agrees again.
	AppliedIndex uint64 `json:"applied_index"`
	AppliedHash  string `json:"applied_hash"` // "" while the chain is not known
	// Diverged is the mismatch a checkpoint found ("" if none): the node
	// then serves no client.
	Diverged string `json:"diverged"`

	// With ?at=N: the chain's value as of index N, or why not.
	AtIndex uint64 `json:"at_index,omitempty"`
	AtHash  string `json:"at_hash,omitempty"`
	AtError string `json:"at_error,omitempty"`
}

// serveDigest answers GET /debug/digest[?at=N]: the state machine's digest
// and the index it reflects, and the applied-entry hash. The chaos harness
// (test/jepsen-lite) and the multi-node tests compare them across nodes:
// the hashes at a common index (?at=) show any divergence that ever
// happened, the digests show the state.
func (n *Node) serveDigest(w http.ResponseWriter, r *http.Request) {
	var at uint64
	if v := r.URL.Query().Get("at"); v != "" {
		var err error
		if at, err = strconv.ParseUint(v, 10, 64); err != nil || at == 0 {
			http.Error(w, fmt.Sprintf("at=%q: want a log index (a positive integer)", v), http.StatusBadRequest)
			return
		}
	}
	before := n.machine.LastIndex()
	d := n.machine.Digest()
	after := n.machine.LastIndex()
	resp := digestResponse{ID: n.cfg.ID, Index: after, Digest: hex.EncodeToString(d[:]), Stable: before == after}
	idx, h, known := n.raft.AppliedHash()
	resp.AppliedIndex = idx
	if known {
		resp.AppliedHash = hex.EncodeToString(h[:])
	}
	if err := n.raft.Diverged(); err != nil {
		resp.Diverged = err.Error()
	}
	if at != 0 {
		resp.AtIndex = at
		if h, ok, why := n.raft.HashAt(at); ok {
			resp.AtHash = hex.EncodeToString(h[:])
		} else {
			resp.AtError = why
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

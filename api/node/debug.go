package node

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
)

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

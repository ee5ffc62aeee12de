package proccluster

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Every node keeps a chained hash of every log entry it applied and serves
// it at /debug/digest (applied_index, applied_hash; ?at=N for the hash at
// exactly N). Nodes that applied the same entries agree at every index
// they share; a replica that ever applied another entry never agrees
// again.

// NodeHash is one node's part of a HashComparison.
type NodeHash struct {
	Addr string
	Last Digest // its last answer without ?at
	Err  error  // it could not be read: nothing else is set
	// Its answer at the compared index (AtHash "" and AtError when it has
	// no hash there), or why it could not be read.
	At    Digest
	AtErr error
}

// Reports says whether the node reports the running hash at all.
func (n NodeHash) Reports() bool { return n.Err == nil && n.Last.AppliedIndex != nil }

// Hashed says whether the node gave its hash at the compared index.
func (n NodeHash) Hashed(at uint64) bool {
	return n.Reports() && n.AtErr == nil && n.At.AtHash != "" && n.At.AtIndex == at
}

// HashComparison is what CompareAppliedHashes found.
type HashComparison struct {
	At      uint64 // the index compared: the smallest any node had applied (0: none)
	Highest uint64 // the highest any node had applied
	Nodes   []NodeHash
}

// Differ says whether two nodes' hashes at At differ.
func (h HashComparison) Differ() bool {
	seen := ""
	for _, n := range h.Nodes {
		if n.Hashed(h.At) {
			if seen != "" && n.At.AtHash != seen {
				return true
			}
			seen = n.At.AtHash
		}
	}
	return false
}

// Hashes lists "node0 <12 hex digits>" for each node that gave its hash.
func (h HashComparison) Hashes(sep string) string {
	var parts []string
	for _, n := range h.Nodes {
		if n.Hashed(h.At) {
			parts = append(parts, fmt.Sprintf("%s %.12s", n.At.ID, n.At.AtHash))
		}
	}
	return strings.Join(parts, sep)
}

// CompareAppliedHashes reads every node's /debug/digest (the nodes' HTTP
// addresses; token as for ReadDigest) every `every` until each answers and
// those that report the running hash have applied the same index and know
// their chain (a young cluster's leader proposes the entry that anchors
// it after its election), or until bound passes or ctx ends. Then it asks
// each of them for its hash at the smallest applied index, which every one
// has applied.
func CompareAppliedHashes(ctx context.Context, addrs []string, token string, bound, every time.Duration) HashComparison {
	var h HashComparison
	poll(ctx, bound, every, func() bool {
		h = HashComparison{Nodes: make([]NodeHash, len(addrs))}
		settled := true
		var first *uint64
		for i, a := range addrs {
			n := NodeHash{Addr: a}
			n.Last, n.Err = ReadDigest(ctx, a, 0, token)
			h.Nodes[i] = n
			switch {
			case n.Err != nil:
				settled = false
			case !n.Reports():
			case first == nil:
				first = n.Last.AppliedIndex
				settled = settled && n.Last.AppliedHash != ""
			default:
				settled = settled && *n.Last.AppliedIndex == *first && n.Last.AppliedHash != ""
			}
		}
		return settled
	})
	started := false
	for _, n := range h.Nodes {
		if n.Reports() {
			if idx := *n.Last.AppliedIndex; !started || idx < h.At {
				h.At = idx
			}
			h.Highest, started = max(h.Highest, *n.Last.AppliedIndex), true
		}
	}
	for i := range h.Nodes {
		if n := &h.Nodes[i]; n.Reports() && h.At > 0 {
			n.At, n.AtErr = ReadDigest(ctx, n.Addr, h.At, token)
		}
	}
	return h
}

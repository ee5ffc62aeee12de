package node

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
	"strconv"
	"sync"
	"time"
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
	Index  uint64 `json:"index"`  // the last entry applied when the digest was computed
	Digest string `json:"digest"` // SHA-256 of the state at Index, hex
	// Stable is false when an entry was applied while the digest was
	// computed, or when it was computed before the last entry applied here
	// (a cached digest: see digestCache): ask again.
	Stable bool `json:"stable"`
	// LastIndex is the last entry applied here at the time of the answer;
	// DigestAt when the digest was computed; DigestEvery the least time
	// between two computations while entries are applied.
	LastIndex   uint64 `json:"last_index"`
	DigestAt    string `json:"digest_at"`
	DigestEvery string `json:"digest_every"`

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
// happened, the digests show the state. With auth on it needs the admin
// credential (it is served behind web.Protect, as /metrics is).
func (n *Node) serveDigest(w http.ResponseWriter, r *http.Request) {
	var at uint64
	if v := r.URL.Query().Get("at"); v != "" {
		var err error
		if at, err = strconv.ParseUint(v, 10, 64); err != nil || at == 0 {
			http.Error(w, fmt.Sprintf("at=%q: want a log index (a positive integer)", v), http.StatusBadRequest)
			return
		}
	}
	d := n.digests.get()
	resp := digestResponse{ID: n.cfg.ID, Index: d.index, Digest: hex.EncodeToString(d.digest[:]), Stable: d.stable,
		LastIndex: d.last, DigestAt: d.at.UTC().Format(time.RFC3339Nano), DigestEvery: digestEvery.String()}
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

// digestEvery is the least time between two digests of the whole state
// while entries are being applied: a digest hashes every lock and session,
// which a client polling the endpoint must not make it do per request.
const digestEvery = time.Second

// digester is what the digest cache reads: *fsm.Machine.
type digester interface {
	LastIndex() uint64
	Digest() [32]byte
}

// digestCache computes the state's digest at most once per applied index,
// and at most once per digestEvery while the index moves; concurrent
// requests wait for one computation rather than each making their own.
type digestCache struct {
	m   digester
	now func() time.Time

	mu   sync.Mutex
	have bool
	cur  digestValue
}

type digestValue struct {
	index, last uint64 // the index the digest reflects; the last applied at the answer
	digest      [32]byte
	// stable: no entry was applied while it was computed (and, as
	// returned by get, none since)
	stable bool
	at     time.Time
}

func newDigestCache(m digester, now func() time.Time) *digestCache {
	return &digestCache{m: m, now: now}
}

func (c *digestCache) get() digestValue {
	c.mu.Lock()
	defer c.mu.Unlock()
	last := c.m.LastIndex()
	fresh := c.have && c.cur.stable && c.cur.index == last
	recent := c.have && c.now().Sub(c.cur.at) < digestEvery
	if !fresh && !recent {
		before := last
		d := c.m.Digest()
		last = c.m.LastIndex()
		c.cur, c.have = digestValue{index: last, digest: d, stable: before == last, at: c.now()}, true
	}
	v := c.cur
	v.last = last
	v.stable = v.stable && v.index == last
	return v
}

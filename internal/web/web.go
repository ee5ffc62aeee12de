// Package web serves a node's status page: the members and the leader, and
// every namespace's held and pending locks with their holders, tokens and
// ages, and the changes this node applied most recently, live. The page
// (HTML, CSS and a small script, no framework) is embedded in the binary
// and loads nothing from elsewhere; its script reads the JSON endpoint
// /api/state, and reads it again whenever the event stream /api/events
// (Server-Sent Events from the node's watch history, events.go) says an
// entry changed something; without the stream (no history, too many
// streams, an old browser) it polls /api/state every second. Both read
// this node's own state: it is not linearizable (a follower may lag the
// leader by a few entries), and the page says so. `lockcluster query` is
// the linearizable view.
//
// The page shows every namespace: it is an administrator's view. When the
// cluster has credentials, Options.Authorize must check an admin one.
//
// This package is implementation, not API: it makes no compatibility
// promise, and it exports only what other lockcluster packages use. The
// stable API is the client (package lockcluster) and the wire contract
// (api/lockclusterv1); the JSON of /api/state and /api/events is the
// page's, not a contract.
package web

import (
	"context"
	"embed"
	"encoding/json"
	"github.com/lockcluster/lockcluster/internal/watchhist"
	"io/fs"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/raftnode"
)

//go:embed static
var static embed.FS

// Raft is what the page reads of the node's Raft member; *raftnode.Node
// has it.
type Raft interface {
	Leader() (id, addr string)
	State() string
	Members() ([]raftnode.Member, error)
}

var _ Raft = (*raftnode.Node)(nil)

// Options configure Handler.
type Options struct {
	NodeID  string
	Machine *fsm.Machine
	Raft    Raft
	// Authorize, when set, decides whether a request may see the page and
	// its data; a refused request gets 401 with a Basic challenge, so that
	// a browser asks for credentials (and then sends them with the page's
	// polls too). nil: open to anyone who reaches the port.
	Authorize func(*http.Request) bool
	// Health, when set, returns what the leader sees of each member, by id
	// (internal/node asks the leader); members it omits show no health.
	Health func() map[string]Health
	// History, when set, is the node's watch history, which /api/events
	// streams to the page (events.go); nil: /api/events is 404 and the
	// page polls /api/state.
	History *watchhist.History
	// StartChanges, when set, makes the cluster build the changes the
	// history holds (they are built only once the cluster has been
	// watched: fsm's startchanges.go); /api/events calls it first, and
	// answers 503 (the page then polls) when it fails.
	StartChanges func(context.Context) error
	// Feeds, when set, counts the /api/events streams open (the node adds
	// them to lockcluster_watches).
	Feeds *atomic.Int64
	// maxLocks (tests) bounds the held and the pending locks listed per namespace
	// (default 200); the counts are always complete.
	maxLocks int
	// now (tests) is the clock of the ages (default time.Now).
	now func() time.Time
	// Tests: the bounds of /api/events (events.go; 0: the defaults).
	maxStreams, maxStreamsPerIP int
	heartbeat, writeTimeout     time.Duration
}

// Handler serves the page at /, its assets under /static/, its data at
// /api/state and its live feed at /api/events; anything else is 404. Mount
// it at "/".
func Handler(o Options) http.Handler {
	h, _ := handler(o)
	return h
}

// handler is Handler, with the event streams (for tests: how many run).
func handler(o Options) (http.Handler, *events) {
	if o.maxLocks <= 0 {
		o.maxLocks = 200
	}
	if o.now == nil {
		o.now = time.Now
	}
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree always has it
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, sub, "index.html")
	})
	mux.HandleFunc("GET /static/{file}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("file")
		if fi, err := fs.Stat(sub, name); err != nil || fi.IsDir() || name == "index.html" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, sub, name)
	})
	mux.HandleFunc("GET /api/state", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", " ")
		_ = enc.Encode(snapshot(o))
	})
	ev := newEvents(o)
	mux.Handle("GET /api/events", ev)
	return Protect(o.Authorize, secureHeaders(mux)), ev
}

// Protect answers 401, with a Basic challenge, to the requests authorize
// refuses, and passes the others to h. A nil authorize lets everything
// through. The lead's /metrics can use it too.
func Protect(authorize func(*http.Request) bool, h http.Handler) http.Handler {
	if authorize == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !authorize(r) {
			w.Header().Set("WWW-Authenticate", `Basic realm="lockcluster", charset="UTF-8"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// secureHeaders keep the page to its own origin: no inline script, no
// framing, nothing fetched from elsewhere. Holders' labels come from
// clients; the script only ever puts them in text nodes.
func secureHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

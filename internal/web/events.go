package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/lockcluster/lockcluster/internal/watchhist"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockcluster/lockcluster/fsm"
)

// The page's live feed: GET /api/events, Server-Sent Events from the node's
// watch history (internal/server/watchhist.go), one event per applied
// entry that changed anything, its id the entry's index:
//
//	id: 42
//	data: {"index":42,"time":"…","changes":[{"kind":"granted","namespace":"billing",…}]}
//
// A browser that reconnects sends the last id it saw (Last-Event-ID) and
// the stream resumes after it when the history still holds every change
// after it; otherwise (the history moved past it, or it is no index this
// node has applied) the stream starts at the node's applied index with an
// event named reset, and the page reads /api/state again. A reader that
// falls behind the history is reset the same way. A comment every
// heartbeat keeps proxies from closing an idle stream. Records' values are
// never sent: their name and size only.
//
// Streams are bounded, overall and per client address (over either: 503),
// and a reader that takes nothing for writeTimeout is cut.

const (
	defaultMaxStreams      = 32
	defaultMaxStreamsPerIP = 8
	defaultHeartbeat       = 15 * time.Second
	defaultWriteTimeout    = 10 * time.Second
	// startTimeout bounds the start of the cluster's changes (Options.StartChanges).
	startTimeout = 10 * time.Second
	// eventsRound bounds the changes taken from the history at once.
	eventsRound = 1024
	// retryMillis is how long a browser waits before it reconnects.
	retryMillis = 2000
)

// event is the JSON of one applied entry's changes.
type event struct {
	Index   uint64        `json:"index"`
	Time    time.Time     `json:"time"` // the leader's clock in the entry
	Changes []eventChange `json:"changes"`
}

// eventChange is one fsm.Change, without a record's value.
type eventChange struct {
	Kind       string       `json:"kind"`
	Namespace  string       `json:"namespace"`
	Names      []string     `json:"names"`
	Mode       string       `json:"mode,omitempty"`
	MaxHolders uint32       `json:"max_holders,omitempty"`
	Session    uint64       `json:"session,omitempty"`
	RequestID  uint64       `json:"request_id,omitempty"`
	ClientID   string       `json:"client_id,omitempty"`
	Label      string       `json:"label,omitempty"`
	Token      uint64       `json:"token,omitempty"`
	Cause      string       `json:"cause,omitempty"`
	Reason     string       `json:"reason,omitempty"`
	Record     *eventRecord `json:"record,omitempty"`
}

// eventRecord is a record set or deleted: its name and the size of its
// value, not the value.
type eventRecord struct {
	Name  string `json:"name"`
	Size  int    `json:"size"`
	Token uint64 `json:"token,omitempty"`
}

func toEvent(b watchhist.Batch) event {
	ev := event{Index: b.Index, Time: time.Unix(0, b.Time).UTC(), Changes: make([]eventChange, len(b.Changes))}
	for i := range b.Changes {
		c := &b.Changes[i]
		ec := eventChange{Kind: c.Kind.String(), Namespace: c.Namespace, Names: c.Names, MaxHolders: c.MaxHolders,
			Session: c.Session, RequestID: c.RequestID, ClientID: c.ClientID, Label: c.Label, Token: c.Token, Reason: c.Reason}
		if ec.Names == nil {
			ec.Names = []string{}
		}
		switch c.Kind {
		case fsm.ChangeGranted, fsm.ChangeQueued, fsm.ChangeReleased, fsm.ChangeAborted, fsm.ChangeStolen:
			ec.Mode = c.Mode.String()
		}
		if c.Cause != 0 {
			ec.Cause = c.Cause.String()
		}
		if r := c.Record; r != nil {
			ec.Record = &eventRecord{Name: r.Name, Size: len(r.Value), Token: r.Token}
		}
		ev.Changes[i] = ec
	}
	return ev
}

// streamLimit bounds the event streams served at once, overall and per
// client address.
type streamLimit struct {
	mu         sync.Mutex
	max, perIP int
	total      int
	byIP       map[string]int
}

func (l *streamLimit) acquire(ip string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total >= l.max || l.byIP[ip] >= l.perIP {
		return false
	}
	l.total++
	l.byIP[ip]++
	return true
}

func (l *streamLimit) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.byIP[ip]--; l.byIP[ip] <= 0 {
		delete(l.byIP, ip)
	}
}

// streams is the number of event streams served now.
func (l *streamLimit) streams() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// events serves /api/events.
type events struct {
	hist         *watchhist.History
	start        func(context.Context) error
	feeds        *atomic.Int64
	limit        *streamLimit
	heartbeat    time.Duration
	writeTimeout time.Duration
}

func newEvents(o Options) *events {
	e := &events{hist: o.History, start: o.StartChanges, feeds: o.Feeds, heartbeat: o.heartbeat, writeTimeout: o.writeTimeout,
		limit: &streamLimit{max: o.maxStreams, perIP: o.maxStreamsPerIP, byIP: map[string]int{}}}
	if e.limit.max <= 0 {
		e.limit.max = defaultMaxStreams
	}
	if e.limit.perIP <= 0 {
		e.limit.perIP = defaultMaxStreamsPerIP
	}
	if e.heartbeat <= 0 {
		e.heartbeat = defaultHeartbeat
	}
	if e.writeTimeout <= 0 {
		e.writeTimeout = defaultWriteTimeout
	}
	return e
}

func clientIP(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

func (e *events) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if e.hist == nil {
		http.NotFound(w, r)
		return
	}
	ip := clientIP(r)
	if !e.limit.acquire(ip) {
		w.Header().Set("Retry-After", "10")
		http.Error(w, "too many event streams on this node: the page polls instead", http.StatusServiceUnavailable)
		return
	}
	defer e.limit.release(ip)
	if e.feeds != nil {
		e.feeds.Add(1)
		defer e.feeds.Add(-1)
	}
	if e.start != nil {
		ctx, cancel := context.WithTimeout(r.Context(), startTimeout)
		err := e.start(ctx)
		cancel()
		if err != nil {
			w.Header().Set("Retry-After", "10")
			http.Error(w, "the cluster does not stream changes now ("+err.Error()+"): the page polls instead", http.StatusServiceUnavailable)
			return
		}
	}

	var buf bytes.Buffer
	fmt.Fprintf(&buf, "retry: %d\n\n", retryMillis)
	// Where to start: after the browser's last event when the history still
	// holds every change after it, else at the applied index, with a reset.
	after := e.hist.Applied()
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		last, err := strconv.ParseUint(id, 10, 64)
		if err == nil && last >= e.hist.Oldest() && last <= after {
			after = last
		} else {
			writeReset(&buf, after, e.hist.Oldest())
		}
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no") // a proxy in front: do not buffer
	w.WriteHeader(http.StatusOK)

	rc := http.NewResponseController(w)
	flush := func() error {
		if err := rc.SetWriteDeadline(time.Now().Add(e.writeTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
		_, err := w.Write(buf.Bytes())
		buf.Reset()
		if err != nil {
			return err
		}
		return rc.Flush()
	}
	if err := flush(); err != nil {
		return
	}
	heartbeat := time.NewTimer(e.heartbeat)
	defer heartbeat.Stop()
	for {
		batches, upTo, wake, oldest, compacted := e.hist.Next(after, eventsRound)
		if compacted {
			// The reader fell behind what the history keeps.
			after = e.hist.Applied()
			writeReset(&buf, after, oldest)
		}
		for _, b := range batches {
			data, err := json.Marshal(toEvent(b))
			if err != nil {
				return // cannot happen: strings and numbers
			}
			fmt.Fprintf(&buf, "id: %d\ndata: %s\n\n", b.Index, data)
		}
		after = max(after, upTo)
		if buf.Len() > 0 {
			if err := flush(); err != nil {
				return
			}
			heartbeat.Reset(e.heartbeat)
			continue
		}
		select {
		case <-wake:
		case <-heartbeat.C:
			buf.WriteString(": heartbeat\n\n")
			if err := flush(); err != nil {
				return
			}
			heartbeat.Reset(e.heartbeat)
		case <-r.Context().Done():
			return
		}
	}
}

// writeReset writes an event reset: the stream goes on after index, and
// what came before it must be read again (/api/state).
func writeReset(buf *bytes.Buffer, index, oldest uint64) {
	fmt.Fprintf(buf, "event: reset\nid: %d\ndata: {\"index\":%d,\"oldest\":%d}\n\n", index, index, oldest)
}

package web

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"github.com/lockcluster/lockcluster/internal/watchhist"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/testutil"
	"github.com/lockcluster/lockcluster/raftnode"
)

// machine returns a lock manager where namespace billing has alpha holding
// invoices and beta waiting for it.
func machine(t *testing.T, now time.Time) *fsm.Machine {
	t.Helper()
	m := fsm.New()
	var index uint64
	apply := func(at time.Time, cmd fsm.Command) fsm.Result {
		index++
		r := m.Apply(index, fsm.Entry{Time: at.UnixNano(), Cmd: cmd}).Result
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		return r
	}
	ttl := int64(10 * time.Second)
	a := apply(now, &fsm.OpenSession{Namespace: "billing", Label: "alpha", TTL: ttl, ClientID: "client-a"}).Session
	b := apply(now, &fsm.OpenSession{Namespace: "billing", Label: "beta <script>", TTL: ttl, ClientID: "client-b"}).Session
	apply(now.Add(-90*time.Second), &fsm.Request{Session: a, Namespace: "billing", RequestID: 1, Names: []string{"invoices"}})
	apply(now.Add(-30*time.Second), &fsm.Request{Session: b, Namespace: "billing", RequestID: 7, Names: []string{"invoices"}})
	return m
}

func get(t *testing.T, h http.Handler, method, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Result()
}

func TestHandler(t *testing.T) {
	now := time.Now()
	h := Handler(Options{NodeID: "node0", Machine: machine(t, now), now: func() time.Time { return now }})
	for _, tc := range []struct {
		method, path string
		code         int
		ctype, body  string
	}{
		{"GET", "/", 200, "text/html", `<script src="static/app.js"`},
		{"GET", "/static/app.js", 200, "javascript", "api/state"},
		{"GET", "/static/app.js", 200, "javascript", `new EventSource("api/events")`},
		{"GET", "/api/events", 404, "", ""}, // no history: the page polls
		{"GET", "/static/style.css", 200, "text/css", "table"},
		{"GET", "/api/state", 200, "application/json", `"linearizable": false`},
		{"GET", "/nope", 404, "", ""},
		{"GET", "/static/", 404, "", ""}, // no directory listing
		{"GET", "/static/index.html", 404, "", ""},
		{"POST", "/api/state", 405, "", ""},
	} {
		resp := get(t, h, tc.method, tc.path)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != tc.code {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.code)
			continue
		}
		if !strings.Contains(resp.Header.Get("Content-Type"), tc.ctype) || !strings.Contains(string(body), tc.body) {
			t.Errorf("%s %s: Content-Type %q, body %.200q; want %q containing %q", tc.method, tc.path, resp.Header.Get("Content-Type"), body, tc.ctype, tc.body)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("%s %s: Content-Security-Policy %q", tc.method, tc.path, csp)
		}
	}

	var st state
	if err := json.NewDecoder(get(t, h, "GET", "/api/state").Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if st.Node != "node0" || st.AppliedIndex != 4 || st.Linearizable || len(st.Namespaces) != 1 {
		t.Fatalf("state: %+v", st)
	}
	ns := st.Namespaces[0]
	if ns.Name != "billing" || ns.Sessions != 2 || ns.HeldCount != 1 || ns.PendingCount != 1 || len(ns.Held) != 1 || len(ns.Pending) != 1 || ns.Truncated {
		t.Fatalf("namespace: %+v", ns)
	}
	held, pend := ns.Held[0], ns.Pending[0]
	if held.Name != "invoices" || held.Label != "alpha" || held.ClientID != "client-a" || held.Token != 3 || held.Mode != "exclusive" ||
		held.AcquiredAt == nil || held.AgeSeconds != 90 {
		t.Errorf("held: %+v", held)
	}
	if pend.Name != "invoices" || pend.Label != "beta <script>" || pend.RequestID != 7 || pend.Token != 0 || pend.AcquiredAt != nil || pend.AgeSeconds != 30 {
		t.Errorf("pending: %+v", pend)
	}

	// Lists are cut at maxLocks; the counts stay complete.
	st = snapshot(Options{Machine: machine(t, now), maxLocks: 1})
	if ns := st.Namespaces[0]; len(ns.Held) != 1 || len(ns.Pending) != 1 || ns.Truncated {
		t.Errorf("MaxLocks 1 with one lock of each: %+v", ns)
	}
}

func TestAuthorize(t *testing.T) {
	m := machine(t, time.Now())
	allow := false
	h := Handler(Options{Machine: m, Authorize: func(r *http.Request) bool {
		_, pw, ok := r.BasicAuth()
		return allow && ok && pw == "admin-secret"
	}})
	for _, path := range []string{"/", "/api/state", "/static/app.js"} {
		resp := get(t, h, "GET", path)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") || strings.Contains(string(body), "invoices") {
			t.Errorf("GET %s unauthorized: %d, WWW-Authenticate %q, body %q", path, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
		}
	}
	allow = true
	req := httptest.NewRequest("GET", "/api/state", nil)
	req.SetBasicAuth("", "admin-secret")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "invoices") {
		t.Errorf("GET /api/state authorized: %d %q", rec.Code, rec.Body.String())
	}
}

type fakeRaft struct{ ms []raftnode.Member }

func (f fakeRaft) Members() ([]raftnode.Member, error) { return f.ms, nil }
func (f fakeRaft) State() string                       { return "Follower" }
func (f fakeRaft) Leader() (string, string)            { return "n1", "raft-n1" }

// The members carry what the leader sees of each (Options.Health): a dead
// member shows unreachable, not as a follower among the others.
func TestMembersShowHealth(t *testing.T) {
	ms := []raftnode.Member{{ID: "n1", Suffrage: "Voter", Leader: true}, {ID: "n2", Suffrage: "Voter"}, {ID: "n3", Suffrage: "Voter"}}
	st := snapshot(Options{NodeID: "n2", Raft: fakeRaft{ms}, Machine: fsm.New(), Health: func() map[string]Health {
		return map[string]Health{"n1": {Reachable: true}, "n3": {SinceContactSeconds: 12}}
	}})
	if len(st.Members) != 3 || st.Members[0].Health == nil || !st.Members[0].Health.Reachable || st.Members[1].Health != nil ||
		st.Members[2].Health == nil || st.Members[2].Health.Reachable || st.Members[2].Health.SinceContactSeconds != 12 {
		t.Fatalf("members: %+v", st.Members)
	}
}

// A member that answers the leader but serves no clients (its Status
// unfit) shows why, in /api/state's JSON, which the page shows as fenced.
func TestMembersShowFencedHealth(t *testing.T) {
	ms := []raftnode.Member{{ID: "n1", Suffrage: "Voter", Leader: true}, {ID: "n2", Suffrage: "Voter"}}
	const why = "this node's raft log is damaged from index 882 (wal: bad frame header); it serves no clients"
	st := snapshot(Options{NodeID: "n1", Raft: fakeRaft{ms}, Machine: fsm.New(), Health: func() map[string]Health {
		return map[string]Health{"n1": {Reachable: true}, "n2": {Reachable: true, Unfit: why}}
	}})
	b, err := json.Marshal(st.Members)
	if err != nil {
		t.Fatal(err)
	}
	var back []struct {
		ID     string         `json:"id"`
		Health map[string]any `json:"health"`
	}
	if err := json.Unmarshal(b, &back); err != nil || len(back) != 2 {
		t.Fatalf("%v: %s", err, b)
	}
	if _, ok := back[0].Health["unfit"]; ok || back[1].Health["unfit"] != why || back[1].Health["reachable"] != true {
		t.Fatalf("members: %s", b)
	}
}

// feed applies entries to a lock manager and feeds their changes to a
// watch history, as a node's raft adapter does.
type feed struct {
	t     *testing.T
	m     *fsm.Machine
	h     *watchhist.History
	index uint64
	at    time.Time
}

func newFeed(t *testing.T, history int) *feed {
	m := fsm.New()
	m.KeepChanges(true)
	return &feed{t: t, m: m, h: watchhist.New(history), at: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}
}

func (f *feed) apply(cmd fsm.Command) fsm.Result {
	f.t.Helper()
	f.index++
	f.at = f.at.Add(time.Second)
	ap := f.m.Apply(f.index, fsm.Entry{Time: f.at.UnixNano(), Cmd: cmd})
	if ap.Result.Err != nil {
		f.t.Fatal(ap.Result.Err)
	}
	f.h.Append(f.index, f.at.UnixNano(), ap.Changes)
	return ap.Result
}

// sse is one message of an event stream: an event (its id, name and
// data) or a comment.
type sse struct {
	id, name, data, comment string
}

// openEvents opens /api/events on srv, with Last-Event-ID lastID unless
// it is "", and returns the response and, when it is 200, its messages.
func openEvents(t *testing.T, srv *httptest.Server, lastID string, edit func(*http.Request)) (*http.Response, <-chan sse) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	if edit != nil {
		edit(req)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	if resp.StatusCode != 200 {
		return resp, nil
	}
	ch := make(chan sse, 100)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		var m sse
		for sc.Scan() {
			line := sc.Text()
			k, v, _ := strings.Cut(line, ":")
			v = strings.TrimPrefix(v, " ")
			switch {
			case line == "":
				if m != (sse{}) {
					ch <- m
				}
				m = sse{}
			case k == "":
				m.comment = v
			case k == "id":
				m.id = v
			case k == "event":
				m.name = v
			case k == "data":
				m.data = v
			}
		}
	}()
	return resp, ch
}

// nextEvent returns the stream's next event, skipping comments.
func nextEvent(t *testing.T, ch <-chan sse) sse {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatal("the event stream ended")
			}
			if m.comment == "" {
				return m
			}
		case <-deadline.C:
			t.Fatal("no event in 10s")
		}
	}
}

// change decodes an event's data, checks its id is its index, and returns
// its changes' kind and names, one "kind names label token" string each.
func changes(t *testing.T, m sse) (index uint64, out []string) {
	t.Helper()
	var ev event
	if err := json.Unmarshal([]byte(m.data), &ev); err != nil || m.name != "" {
		t.Fatalf("event %+v: %v", m, err)
	}
	if m.id != strconv.FormatUint(ev.Index, 10) || ev.Time.IsZero() {
		t.Fatalf("event id %q, data %s: the id is not its index, or it has no time", m.id, m.data)
	}
	for _, c := range ev.Changes {
		out = append(out, c.Kind+" "+c.Namespace+" "+strings.Join(c.Names, ",")+" "+c.Mode+" "+c.Label+" "+strconv.FormatUint(c.Token, 10)+" "+c.Cause)
	}
	return ev.Index, out
}

// /api/events streams each entry's changes in order, with its index as
// the event's id, a record's name and size but not its value, and resumes
// after the browser's Last-Event-ID.
func TestEventsStreamChanges(t *testing.T) {
	f := newFeed(t, 0)
	a := f.apply(&fsm.OpenSession{Namespace: "billing", Label: "alpha <b>", TTL: int64(time.Minute), ClientID: "client-a"}).Session
	srv := httptest.NewServer(Handler(Options{Machine: f.m, History: f.h, heartbeat: 20 * time.Millisecond}))
	t.Cleanup(srv.Close)

	resp, ch := openEvents(t, srv, "", nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("Cache-Control") != "no-store" ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("GET /api/events: %d, headers %v", resp.StatusCode, resp.Header)
	}
	// The stream starts at the applied index: the session's opening is
	// not in it. A heartbeat comes while nothing is applied.
	testutil.Eventually(t, 10*time.Second, "a heartbeat", func() bool {
		select {
		case m := <-ch:
			return m.comment == "heartbeat"
		default:
			return false
		}
	})
	grant := f.apply(&fsm.Request{Session: a, Namespace: "billing", RequestID: 1, Names: []string{"invoices"}})
	f.apply(&fsm.OpenSession{Namespace: "billing", Label: "beta", TTL: int64(time.Minute)}) // no changes: no event
	f.apply(&fsm.SetRecord{Session: a, Namespace: "billing", RequestID: 1, Token: grant.Token, Name: "invoices", Value: []byte("secret-value")})
	f.apply(&fsm.Release{Session: a, Namespace: "billing", RequestID: 1})
	tok := strconv.FormatUint(grant.Token, 10)
	i1, c1 := changes(t, nextEvent(t, ch))
	if i1 != 2 || len(c1) != 1 || c1[0] != "granted billing invoices exclusive alpha <b> "+tok+" " {
		t.Fatalf("first event: index %d, %q", i1, c1)
	}
	rec := nextEvent(t, ch)
	if i, c := changes(t, rec); i != 4 || len(c) != 1 || !strings.HasPrefix(c[0], "record-set billing") ||
		strings.Contains(rec.data, "secret-value") || !strings.Contains(rec.data, `"record":{"name":"invoices","size":12`) {
		t.Fatalf("the record's event: %s", rec.data)
	}
	i3, c3 := changes(t, nextEvent(t, ch))
	if i3 != 5 || len(c3) != 1 || c3[0] != "released billing invoices exclusive alpha <b> "+tok+" " {
		t.Fatalf("third event: index %d, %q", i3, c3)
	}

	// A browser that saw the grant resumes after it.
	_, again := openEvents(t, srv, "2", nil)
	if i, _ := changes(t, nextEvent(t, again)); i != 4 {
		t.Fatalf("resumed after 2: first event %d, want 4", i)
	}
	if i, _ := changes(t, nextEvent(t, again)); i != 5 {
		t.Fatalf("resumed after 2: second event %d, want 5", i)
	}
}

// A Last-Event-ID the history no longer holds every change after (or no
// index this node has applied) starts the stream with an event reset at
// the applied index; the stream goes on from there.
func TestEventsResetWhenCompacted(t *testing.T) {
	f := newFeed(t, 2)
	a := f.apply(&fsm.OpenSession{Namespace: "billing", Label: "alpha", TTL: int64(time.Minute)}).Session
	for i := uint64(1); i <= 3; i++ {
		f.apply(&fsm.Request{Session: a, Namespace: "billing", RequestID: i, Names: []string{"n" + strconv.FormatUint(i, 10)}})
	}
	if f.h.Oldest() == 0 {
		t.Fatalf("the history kept everything: oldest %d", f.h.Oldest())
	}
	srv := httptest.NewServer(Handler(Options{Machine: f.m, History: f.h}))
	t.Cleanup(srv.Close)
	for _, last := range []string{"1", "99", "not-a-number"} {
		at := strconv.FormatUint(f.index, 10)
		_, ch := openEvents(t, srv, last, nil)
		m := nextEvent(t, ch)
		if m.name != "reset" || m.id != at || !strings.Contains(m.data, `"index":`+at+",") {
			t.Fatalf("Last-Event-ID %s: %+v, want a reset at %s", last, m, at)
		}
		f.apply(&fsm.Request{Session: a, Namespace: "billing", RequestID: f.index + 10, Names: []string{"x" + last}})
		if i, c := changes(t, nextEvent(t, ch)); i != f.index || len(c) != 1 || !strings.HasPrefix(c[0], "granted billing x"+last) {
			t.Fatalf("Last-Event-ID %s: after the reset %d %q", last, i, c)
		}
	}
}

// Streams are bounded: over the bound, 503; a stream that ends makes room.
// Without a history the endpoint is 404 (the page polls).
func TestEventsBounded(t *testing.T) {
	f := newFeed(t, 0)
	h, ev := handler(Options{Machine: f.m, History: f.h, maxStreams: 2})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	first, _ := openEvents(t, srv, "", func(r *http.Request) { *r = *r.WithContext(ctx) })
	second, _ := openEvents(t, srv, "", nil)
	if first.StatusCode != 200 || second.StatusCode != 200 {
		t.Fatalf("two streams: %d %d", first.StatusCode, second.StatusCode)
	}
	third, _ := openEvents(t, srv, "", nil)
	if third.StatusCode != http.StatusServiceUnavailable || third.Header.Get("Retry-After") == "" {
		t.Fatalf("a third stream over a bound of 2: %d %v", third.StatusCode, third.Header)
	}
	cancel()
	testutil.Eventually(t, 10*time.Second, "the first stream to end", func() bool { return ev.limit.streams() == 1 })
	if again, _ := openEvents(t, srv, "", nil); again.StatusCode != 200 {
		t.Fatalf("a stream once one ended: %d", again.StatusCode)
	}

	// Per client address too.
	h, _ = handler(Options{Machine: f.m, History: f.h, maxStreamsPerIP: 1})
	srv2 := httptest.NewServer(h)
	t.Cleanup(srv2.Close)
	if r, _ := openEvents(t, srv2, "", nil); r.StatusCode != 200 {
		t.Fatalf("one stream: %d", r.StatusCode)
	}
	if r, _ := openEvents(t, srv2, "", nil); r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a second stream from one address over a bound of 1: %d", r.StatusCode)
	}

	if resp := get(t, Handler(Options{Machine: f.m}), "GET", "/api/events"); resp.StatusCode != 404 {
		t.Fatalf("/api/events without a history: %d", resp.StatusCode)
	}
}

// A reader that takes nothing is cut once a write has waited writeTimeout.
func TestEventsCutsASlowReader(t *testing.T) {
	f := newFeed(t, 1<<20)
	h, ev := handler(Options{Machine: f.m, History: f.h, writeTimeout: 100 * time.Millisecond})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	resp, _ := openEvents(t, srv, "", nil) // nobody reads its body
	if resp.StatusCode != 200 {
		t.Fatal(resp.StatusCode)
	}
	// Some tens of MiB of events: more than the sockets' buffers hold.
	big := strings.Repeat("n", 4000)
	for i := 1; i <= 2000; i++ {
		names := make([]string, 8)
		for j := range names {
			names[j] = big
		}
		f.h.Append(uint64(i), 0, []fsm.Change{{Kind: fsm.ChangeGranted, Namespace: "ns", Names: names}})
	}
	testutil.Eventually(t, 20*time.Second, "the stream of a reader that takes nothing to be cut", func() bool { return ev.limit.streams() == 0 })
}

// With credentials, /api/events needs them, as the page does.
func TestEventsAuthorize(t *testing.T) {
	f := newFeed(t, 0)
	srv := httptest.NewServer(Handler(Options{Machine: f.m, History: f.h, Authorize: func(r *http.Request) bool {
		_, pw, ok := r.BasicAuth()
		return ok && pw == "admin-secret"
	}}))
	t.Cleanup(srv.Close)
	if resp, _ := openEvents(t, srv, "", nil); resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
		t.Fatalf("unauthorized: %d %v", resp.StatusCode, resp.Header)
	}
	if resp, _ := openEvents(t, srv, "", func(r *http.Request) { r.SetBasicAuth("", "wrong") }); resp.StatusCode != 401 {
		t.Fatalf("a wrong password: %d", resp.StatusCode)
	}
	resp, ch := openEvents(t, srv, "", func(r *http.Request) { r.SetBasicAuth("", "admin-secret") })
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("authorized: %d %v", resp.StatusCode, resp.Header)
	}
	f.apply(&fsm.OpenSession{Namespace: "billing", Label: "alpha", TTL: int64(time.Minute)})
	f.apply(&fsm.CloseSession{Namespace: "billing", Session: 1})
	if m := nextEvent(t, ch); !strings.Contains(m.data, `"kind":"session-ended"`) {
		t.Fatalf("authorized stream: %+v", m)
	}
}

// /api/events starts the cluster's changes (Options.StartChanges) before
// it streams; when they cannot start, 503, and the page polls.
func TestEventsStartTheChanges(t *testing.T) {
	f := newFeed(t, 0)
	var calls atomic.Int32
	var fail atomic.Bool
	start := func(ctx context.Context) error {
		calls.Add(1)
		if fail.Load() {
			return errors.New("no leader")
		}
		return nil
	}
	srv := httptest.NewServer(Handler(Options{Machine: f.m, History: f.h, StartChanges: start}))
	t.Cleanup(srv.Close)
	if resp, _ := openEvents(t, srv, "", nil); resp.StatusCode != 200 || calls.Load() != 1 {
		t.Fatalf("GET /api/events: %d after %d starts, want 200 after 1", resp.StatusCode, calls.Load())
	}
	fail.Store(true)
	resp, err := http.Get(srv.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "no leader") {
		t.Fatalf("GET /api/events when the changes cannot start: %d %q", resp.StatusCode, body)
	}
}

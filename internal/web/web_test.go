package web

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster/fsm"
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

package fsm

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// rapidDefaults sets the number of checks and of steps per check, unless
// -rapid.checks / -rapid.steps (or RAPID_CHECKS / RAPID_STEPS) say otherwise,
// and keeps rapid from writing fail files into testdata/, which
// TestScenarios walks: a failure prints its -rapid.seed instead.
func rapidDefaults(checks, steps int) {
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, v := range map[string]string{"checks": fmt.Sprint(checks), "steps": fmt.Sprint(steps), "nofailfile": "true"} {
		_, env := os.LookupEnv("RAPID_" + strings.ToUpper(name))
		if !set["rapid."+name] && !env {
			_ = flag.Set("rapid."+name, v)
		}
	}
}

var testNames = []string{"a", "b", "c", ""} // "" is a valid name (SPEC §2)

// gen draws commands that hit the state: the sessions it opened (live or
// not), request ids already used, the next ones, and tokens from the model.
type gen struct {
	ids  []uint64          // every session opened, in order
	ns   map[uint64]string // its namespace
	next map[uint64]uint64 // the next fresh request id of each session
}

func newGen() *gen { return &gen{ns: map[uint64]string{999: "n1"}, next: map[uint64]uint64{}} }

func (g *gen) sessionID(t *rapid.T, mdl *model) uint64 {
	var live []uint64
	for _, id := range g.ids {
		if mdl.sessions[id] != nil {
			live = append(live, id)
		}
	}
	if len(live) > 0 && rapid.IntRange(0, 9).Draw(t, "liveSession") > 0 {
		return rapid.SampledFrom(live).Draw(t, "session")
	}
	if len(g.ids) == 0 {
		return 999
	}
	return rapid.SampledFrom(g.ids).Draw(t, "session")
}

// requestID draws a fresh id (mostly), an old one (a retry) or, with
// fresh=false, one of the session's live requests.
func (g *gen) requestID(t *rapid.T, mdl *model, sid uint64, freshBias int) uint64 {
	if g.next[sid] == 0 {
		g.next[sid] = 1
	}
	k := rapid.IntRange(0, 9).Draw(t, "idKind")
	if s := mdl.sessions[sid]; s != nil && len(s.live) > 0 && k >= freshBias {
		return rapid.SampledFrom(s.live).Draw(t, "live").id
	}
	if g.next[sid] > 1 && k%3 == 0 {
		return rapid.Uint64Range(1, g.next[sid]-1).Draw(t, "oldID")
	}
	return g.next[sid]
}

// note learns the sessions opened and the request ids used.
func (g *gen) note(cmd Command, res Result) {
	use := func(sid, id uint64) {
		if id >= g.next[sid] {
			g.next[sid] = id + 1
		}
	}
	switch c := cmd.(type) {
	case *OpenSession:
		g.ids, g.ns[res.Session] = append(g.ids, res.Session), c.Namespace
	case *Request:
		use(c.Session, c.RequestID)
	case *Abort:
		use(c.Session, c.RequestID)
	}
}

// fmtCmd prints a command for the log of a failing case.
func fmtCmd(cmd Command) string {
	v := reflect.ValueOf(cmd).Elem()
	return fmt.Sprintf("%s%+v", v.Type().Name(), v.Interface())
}

func (g *gen) draw(t *rapid.T, mdl *model) Command {
	kinds := []string{"open", "close", "expire", "request", "request", "request", "request", "release", "release", "abort", "limits", "record", "record"}
	switch rapid.SampledFrom(kinds).Draw(t, "kind") {
	case "limits":
		if rapid.IntRange(0, 2).Draw(t, "doLimits") == 0 {
			l := DefaultLimits()
			l.maxFinished = rapid.SampledFrom([]int64{1, 2, 3, l.maxFinished}).Draw(t, "maxFinished")
			if rapid.IntRange(0, 2).Draw(t, "recordLimits") == 0 {
				l.MaxRecordBytes = rapid.SampledFrom([]int64{2, 3, l.MaxRecordBytes}).Draw(t, "maxRecord")
				l.MaxNamespaceRecordBytes = rapid.SampledFrom([]int64{4, 8, l.MaxNamespaceRecordBytes}).Draw(t, "maxNSRecords")
			}
			return &SetLimits{Limits: l}
		}
	case "record":
		return g.record(t, mdl)
	case "open":
		if len(mdl.sessions) >= 4 {
			break
		}
		c := &OpenSession{Namespace: rapid.SampledFrom([]string{"n1", "n1", "n1", "n2"}).Draw(t, "ns"), TTL: 10e9,
			Label: rapid.SampledFrom([]string{"", "host:1"}).Draw(t, "label"), ClientID: rapid.SampledFrom([]string{"", "cid"}).Draw(t, "client")}
		return c
	case "close":
		sid := g.sessionID(t, mdl)
		return &CloseSession{Session: sid, Namespace: g.nsOf(t, sid)}
	case "expire":
		return &ExpireSession{Session: g.sessionID(t, mdl)}
	case "release":
		sid := g.sessionID(t, mdl)
		c := &Release{Session: sid, Namespace: g.nsOf(t, sid), RequestID: g.requestID(t, mdl, sid, 2)}
		if s := mdl.sessions[sid]; s != nil {
			if r := s.liveReq(c.RequestID); r != nil && rapid.Bool().Draw(t, "withToken") {
				c.Token = r.token + uint64(rapid.IntRange(0, 3).Draw(t, "tokenSkew")/3)
			}
		}
		c.AckBelow = g.ack(t, sid)
		return c
	case "abort":
		sid := g.sessionID(t, mdl)
		c := &Abort{Session: sid, Namespace: g.nsOf(t, sid), RequestID: g.requestID(t, mdl, sid, 4),
			Reason: rapid.SampledFrom([]string{"", "timeout"}).Draw(t, "reason"), AckBelow: g.ack(t, sid)}
		return c
	}
	sid := g.sessionID(t, mdl)
	c := &Request{Session: sid, Namespace: g.nsOf(t, sid), RequestID: g.requestID(t, mdl, sid, 10)}
	n := rapid.SampledFrom([]int{1, 1, 1, 2, 2, 3}).Draw(t, "nNames")
	c.Names = rapid.SliceOfNDistinct(rapid.SampledFrom(testNames), n, n, rapid.ID[string]).Draw(t, "names")
	switch rapid.IntRange(0, 9).Draw(t, "opts") {
	case 5, 6:
		c.IfAvailable = true
	case 7, 8:
		c.Steal = true
	case 9:
		c.Signal = true
	}
	if !c.Steal && rapid.IntRange(0, 4).Draw(t, "shared") < 2 {
		c.Mode = Shared
		// SPEC §14: mostly the N of the first name (so that requests
		// agree), now and then another.
		c.MaxHolders = semaphoreOf[c.Names[0]]
		if rapid.IntRange(0, 5).Draw(t, "otherN") == 0 {
			c.MaxHolders = rapid.Uint32Range(0, 2).Draw(t, "maxHolders")
		}
	}
	if rapid.IntRange(0, 29).Draw(t, "badOptions") == 0 { // spec §3.2.1 steps 6–8
		c.Steal, c.IfAvailable, c.Signal = true, rapid.Bool().Draw(t, "ia"), rapid.Bool().Draw(t, "sig")
		c.Mode = Mode(rapid.IntRange(0, 1).Draw(t, "mode"))
	}
	c.AckBelow = g.ack(t, sid)
	return c
}

// semaphoreOf is the N the generator mostly asks for, per name.
var semaphoreOf = map[string]uint32{"a": 2, "b": 1}

// record draws a SetRecord, mostly by a holder with its token.
func (g *gen) record(t *rapid.T, mdl *model) Command {
	sid := g.sessionID(t, mdl)
	c := &SetRecord{Session: sid, Namespace: g.nsOf(t, sid), RequestID: g.requestID(t, mdl, sid, 2),
		Name: rapid.SampledFrom(testNames).Draw(t, "recName"), AckBelow: g.ack(t, sid)}
	if s := mdl.sessions[sid]; s != nil {
		if r := s.liveReq(c.RequestID); r != nil {
			c.Token = r.token
			if rapid.IntRange(0, 5).Draw(t, "tokenSkew") == 0 {
				c.Token++
			}
			if rapid.IntRange(0, 5).Draw(t, "otherName") != 0 {
				c.Name = rapid.SampledFrom(r.names).Draw(t, "ownName")
			}
		} else if o, ok := s.finished[c.RequestID]; ok {
			c.Token = o.Token // a retry
		}
	}
	switch rapid.IntRange(0, 5).Draw(t, "recKind") {
	case 0:
		c.Delete = true
	case 1:
		c.Delete, c.Release = true, true
	case 2:
		c.Release = true
	}
	if !c.Delete || rapid.IntRange(0, 9).Draw(t, "deleteWithValue") == 0 {
		c.Value = []byte(rapid.SampledFrom([]string{"", "v", "vv", "vvvv"}).Draw(t, "value"))
		if len(c.Value) == 0 {
			c.Value = nil
		}
	}
	return c
}

// nsOf is the namespace of session sid, or now and then another one (SPEC
// §10: a session of another namespace is as good as closed).
func (g *gen) nsOf(t *rapid.T, sid uint64) string {
	if rapid.IntRange(0, 11).Draw(t, "wrongNS") == 0 {
		return rapid.SampledFrom([]string{"n1", "n2", "n3"}).Draw(t, "otherNS")
	}
	return g.ns[sid]
}

func (g *gen) ack(t *rapid.T, sid uint64) uint64 {
	if rapid.IntRange(0, 14).Draw(t, "doAck") != 0 {
		return 0
	}
	return rapid.Uint64Range(0, g.next[sid]).Draw(t, "ack")
}

// propHarness applies the same entries to the Machine, a twin Machine (for
// determinism) and the model, and compares them after every entry.
type propHarness struct {
	m, twin *Machine
	mdl     *model
	g       *gen
	index   uint64
	time    int64
	seq     map[uint64]uint64 // last event Seq per session
	done    map[reqKey]bool   // requests the machine said were finished
	// snapping is set while m encodes a snapshot between steps: Digest
	// would wait for it, so the twins are compared afterwards instead.
	snapping bool
}

func newPropHarness() *propHarness {
	h := &propHarness{m: New(), twin: New(), mdl: newModel(), g: newGen(), seq: map[uint64]uint64{}, done: map[reqKey]bool{}}
	h.m.KeepChanges(true)
	h.twin.KeepChanges(true)
	return h
}

func (h *propHarness) step(t *rapid.T) {
	cmd := h.g.draw(t, h.mdl)
	h.index++
	h.time += int64(rapid.IntRange(0, 3).Draw(t, "dt"))
	t.Logf("#%d %s", h.index, fmtCmd(cmd))
	e := Entry{Time: h.time, Cmd: cmd}
	b, err := EncodeEntry(e)
	if err != nil {
		t.Fatal(err)
	}
	ap, err := h.m.ApplyBytes(h.index, b)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	ap2 := h.twin.Apply(h.index, e)
	if !reflect.DeepEqual(ap, ap2) {
		t.Fatalf("not deterministic:\n%+v\n%+v", ap, ap2)
	}
	if !h.snapping && h.m.Digest() != h.twin.Digest() {
		t.Fatalf("digests differ")
	}
	var ended uint64
	if ends(cmd) {
		ended = sessionOf(cmd)
	}
	want, wantEv := h.mdl.apply(h.index, h.time, cmd)
	h.g.note(cmd, want)
	compareResult(t, ap.Result, want)
	compareEvents(t, ap.Events, wantEv, ended)
	compareChanges(t, ap.Changes, h.mdl.changes)
	if err := checkEvents(h.m, cmd, h.index, ap, h.seq, h.g.ns, h.done); err != nil {
		t.Fatal(err)
	}
	h.compareState(t)
	if err := checkState(h.m.st); err != nil {
		t.Fatal(err)
	}
}

func compareResult(t *rapid.T, got, want Result) {
	if codeOf(got.Err) != codeOf(want.Err) {
		t.Fatalf("result error: got %v (%v), want code %v", codeOf(got.Err), got.Err, codeOf(want.Err))
	}
	if g, w := tokenOf(got.Err), tokenOf(want.Err); g != w {
		t.Fatalf("result error %v: token %d, want %d", got.Err, g, w)
	}
	got.Err, want.Err = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("result:\n got  %+v\n want %+v", got, want)
	}
}

func tokenOf(err error) uint64 {
	if e, ok := err.(*Error); ok {
		return e.Token
	}
	return 0
}

// compareChanges compares an entry's changes with the model's as multisets
// (the order of grants within one entry is not fixed), and checks the
// order the machine's have: a session's end comes after its aborts and
// releases, and a record write before the release it carries.
func compareChanges(t *rapid.T, got, want []Change) {
	str := func(cs []Change) []string {
		var out []string
		for _, c := range cs {
			rec := "-"
			if c.Record != nil {
				rec = fmt.Sprintf("%+v", *c.Record)
			}
			c.Record = nil
			out = append(out, fmt.Sprintf("%+v %s", c, rec))
		}
		sort.Strings(out)
		return out
	}
	if g, w := str(got), str(want); !slices.Equal(g, w) {
		t.Fatalf("changes:\n got  %s\n want %s", strings.Join(g, "\n      "), strings.Join(w, "\n      "))
	}
	for i, c := range got {
		for _, later := range got[i+1:] {
			if c.Kind == ChangeSessionEnded && later.Session == c.Session && later.Kind != ChangeGranted {
				t.Fatalf("change %+v after the end of its session", later)
			}
			if (c.Kind == ChangeReleased || c.Kind == ChangeGranted) && later.Kind == ChangeRecordSet {
				t.Fatalf("a record written after a release or grant: %+v", got)
			}
		}
	}
}

// compareEvents compares per session, as multisets: the order of grants
// within one entry is not fixed by the spec. The events of a session that
// the entry ended must come exactly in spec §2.6 order.
func compareEvents(t *rapid.T, got, want []Event, ended uint64) {
	g, w := map[uint64][]string{}, map[uint64][]string{}
	for _, e := range got {
		e.Seq = 0 // checked by checkEvents
		g[e.Session] = append(g[e.Session], fmt.Sprintf("%+v", e))
	}
	for _, e := range want {
		w[e.Session] = append(w[e.Session], fmt.Sprintf("%+v", e))
	}
	for s := range w {
		if s != ended {
			sort.Strings(g[s])
			sort.Strings(w[s])
		}
	}
	for _, m := range []map[uint64][]string{g, w} {
		for s := range m {
			if !slices.Equal(g[s], w[s]) {
				t.Fatalf("events of session %d:\n got  %s\n want %s", s, strings.Join(g[s], "\n      "), strings.Join(w[s], "\n      "))
			}
		}
	}
}

// compareState compares every read view of the Machine with the model.
func (h *propHarness) compareState(t *rapid.T) {
	for _, ns := range []string{"n1", "n2"} {
		got, want := h.m.Query(ns), modelQuery(h.mdl, ns)
		if got.Held == nil {
			got.Held = []LockInfo{}
		}
		if got.Pending == nil {
			got.Pending = []LockInfo{}
		}
		for _, held := range [][]LockInfo{got.Held, want.Held} {
			// Grants made by one entry share a token; their order is not fixed.
			sort.SliceStable(held, func(i, j int) bool {
				a, b := held[i], held[j]
				return a.Token < b.Token || a.Token == b.Token && (a.Session < b.Session || a.Session == b.Session && a.RequestID < b.RequestID)
			})
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("query %s:\n got  %+v\n want %+v", ns, got, want)
		}
	}
	for _, id := range h.g.ids {
		got, _, ok := h.m.SessionRequests(id)
		s := h.mdl.sessions[id]
		if ok != (s != nil) {
			t.Fatalf("session %d: open %v, model says %v", id, ok, s != nil)
		}
		if want := modelRequests(s); s != nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("requests of session %d:\n got  %+v\n want %+v", id, got, want)
		}
	}
}

func TestPropertyModel(t *testing.T) {
	rapidDefaults(1000, 50)
	rapid.Check(t, func(t *rapid.T) {
		h := newPropHarness()
		t.Repeat(map[string]func(*rapid.T){"step": h.step})
	})
}

// modelQuery is spec §4.5 on the model, in SPEC §8's order.
func modelQuery(m *model, name string) QueryResult {
	q := QueryResult{Held: []LockInfo{}, Pending: []LockInfo{}}
	info := func(r *mReq, name string) LockInfo {
		li := LockInfo{Name: name, Mode: r.mode, ClientID: r.sess.clientID, Label: r.sess.label, Session: r.sess.id, RequestID: r.id, RequestedAt: r.requestedAt, MaxHolders: r.maxHolders}
		if r.held {
			li.Token, li.AcquiredAt = r.token, r.at
		}
		return li
	}
	if ns := m.ns[name]; ns != nil {
		for _, qu := range ns.queues {
			for _, r := range qu.reqs {
				q.Pending = append(q.Pending, info(r, qu.name))
			}
		}
		for _, r := range ns.held {
			for _, n := range r.names {
				q.Held = append(q.Held, info(r, n))
			}
		}
		// SPEC §12: the records of the names reported, by name.
		names := map[string]bool{}
		for _, l := range append(slices.Clone(q.Held), q.Pending...) {
			names[l.Name] = true
		}
		for _, n := range slices.Sorted(maps.Keys(names)) {
			if rec, ok := ns.records[n]; ok {
				q.Records = append(q.Records, rec)
			}
		}
	}
	return q
}

// modelRequests is what Machine.SessionRequests should say of a session.
func modelRequests(s *mSession) []RequestState {
	if s == nil {
		return nil
	}
	var out []RequestState
	for _, r := range s.live {
		rs := RequestState{RequestID: r.id, Names: r.names, Mode: r.mode, Status: StatusQueued}
		if r.held {
			rs.Status, rs.Token, rs.AcquiredAt = StatusGranted, r.token, r.at
		}
		out = append(out, rs)
	}
	for _, id := range slices.Sorted(maps.Keys(s.finished)) {
		out = append(out, s.finished[id])
	}
	return out
}

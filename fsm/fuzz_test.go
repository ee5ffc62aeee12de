package fsm

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// checkState walks the internal state and checks the invariants of the
// lock manager without trusting any of its counters or helpers.
func checkState(st *state) error {
	if err := checkSessionOrder(st); err != nil {
		return err
	}
	live := map[*request]bool{}
	perNS := map[*namespace]int64{}
	var held, pending int
	for id, s := range st.sessions {
		if s.id != id || st.namespaces[s.ns.name] != s.ns {
			return fmt.Errorf("session %d is filed wrongly", id)
		}
		perNS[s.ns]++
		var h, p int64
		for r := s.liveHead; r != nil; r = r.snext {
			if r.sess != s || st.requests[r.key()] != r || live[r] {
				return fmt.Errorf("request %d of session %d is filed wrongly", r.id, id)
			}
			live[r] = true
			if r.held == r.queued() {
				return fmt.Errorf("request %d of session %d is held %v and queued %v", r.id, id, r.held, r.queued())
			}
			if _, ok := s.find(r.id); ok {
				return fmt.Errorf("request %d of session %d is live and finished", r.id, id)
			}
			if r.held {
				h++
			} else {
				p++
			}
		}
		if h != s.nHeld || p != s.nPending {
			return fmt.Errorf("session %d counts %d/%d, has %d held, %d pending", id, s.nHeld, s.nPending, h, p)
		}
		held, pending = held+int(h), pending+int(p)
		for i, o := range s.finished {
			if o.id < s.floor || i > 0 && o.id <= s.finished[i-1].id {
				return fmt.Errorf("session %d: finished outcomes %v not sorted above floor %d", id, s.finished, s.floor)
			}
		}
		if int64(len(s.finished)) > st.limits.maxFinished {
			return fmt.Errorf("session %d remembers %d outcomes", id, len(s.finished))
		}
	}
	if len(live) != len(st.requests) || held != st.nHeld || pending != st.nPending {
		return fmt.Errorf("%d live requests, %d in the index; held %d/%d pending %d/%d", len(live), len(st.requests), held, st.nHeld, pending, st.nPending)
	}
	records := 0
	for name, ns := range st.namespaces {
		if ns.name != name || ns.sessions != perNS[ns] || (ns.sessions == 0 && len(ns.records) == 0) {
			return fmt.Errorf("namespace %q has %d sessions, counts %d, and %d records", name, perNS[ns], ns.sessions, len(ns.records))
		}
		var bytes int64
		for n, rec := range ns.records {
			if rec == nil || rec.Name != n || rec.Token == 0 || rec.Token > rec.Index || rec.Index > st.logical(st.lastIndex) { // logical (groups.go)
				return fmt.Errorf("namespace %q: record %q is malformed: %+v", name, n, rec)
			}
			bytes += int64(len(n) + len(rec.Value))
		}
		if bytes != ns.recordBytes {
			return fmt.Errorf("namespace %q counts %d record bytes, has %d", name, ns.recordBytes, bytes)
		}
		records += len(ns.records)
		if err := checkNamespace(st, ns, live); err != nil {
			return fmt.Errorf("namespace %q: %w", name, err)
		}
	}
	if records != st.nRecords {
		return fmt.Errorf("%d records, counted %d", records, st.nRecords)
	}
	return checkSemaphores(st, live)
}

// checkSemaphores checks SPEC §14 and its bookkeeping: every resource
// counts its shared requests, which agree on maxHolders, and no more than
// that many hold it.
func checkSemaphores(st *state, live map[*request]bool) error {
	type count struct {
		shared int32
		max    map[uint32]bool
	}
	per := map[*resource]*count{}
	sem := 0
	for r := range live {
		if r.maxHolders > 0 {
			sem++
			if r.mode != Shared {
				return fmt.Errorf("request %d of session %d: maxHolders %d in mode %s", r.id, r.sess.id, r.maxHolders, r.mode)
			}
		}
		if r.mode != Shared {
			continue
		}
		for i := range r.waiters {
			res := r.waiters[i].res
			if per[res] == nil {
				per[res] = &count{max: map[uint32]bool{}}
			}
			per[res].shared++
			per[res].max[r.maxHolders] = true
		}
	}
	if sem != st.nSemaphores {
		return fmt.Errorf("%d semaphore requests, counted %d", sem, st.nSemaphores)
	}
	for _, ns := range st.namespaces {
		for name, res := range ns.resources {
			c := per[res]
			if c == nil {
				c = &count{}
			}
			if c.shared != res.nShared || len(c.max) > 1 || (c.shared > 0 && !c.max[res.maxHolders]) {
				return fmt.Errorf("resource %q counts %d shared of max %d, has %d of %v", name, res.nShared, res.maxHolders, c.shared, c.max)
			}
			if res.maxHolders > 0 && c.shared > 0 && len(res.holders) > int(res.maxHolders) {
				return fmt.Errorf("resource %q has %d holders, max %d", name, len(res.holders), res.maxHolders)
			}
		}
	}
	return nil
}

func checkNamespace(st *state, ns *namespace, live map[*request]bool) error {
	heldOn := map[string][]*request{}
	var n int
	var last uint64
	for r := ns.heldHead; r != nil; r = r.hnext {
		if !live[r] || !r.held || r.sess.ns != ns {
			return fmt.Errorf("held list has request %d of session %d wrongly", r.id, r.sess.id)
		}
		if r.token < last || r.token == 0 || r.token > st.logical(st.lastIndex) { // logical (groups.go)
			return fmt.Errorf("held list out of grant order: token %d after %d (last index %d)", r.token, last, st.lastIndex)
		}
		last = r.token
		for _, name := range r.names {
			heldOn[name] = append(heldOn[name], r)
		}
		n++
	}
	if n != ns.nHeld {
		return fmt.Errorf("%d held, counts %d", n, ns.nHeld)
	}
	for name, hs := range heldOn {
		for _, h := range hs {
			if h.mode == Exclusive && len(hs) > 1 {
				return fmt.Errorf("%q has conflicting holders: %d locks, one exclusive", name, len(hs))
			}
		}
		if res := ns.resources[name]; res == nil || !slices.Equal(res.holders, hs) {
			return fmt.Errorf("holders of %q differ from the held list", name)
		}
	}
	queued := map[*request]int{}
	before := map[[2]*request]bool{} // a queued ahead of b in some queue
	seen := map[*resource]bool{}
	for res := ns.queueHead; res != nil; res = res.qnext {
		if ns.resources[res.name] != res || res.qhead == nil || seen[res] {
			return fmt.Errorf("queue list has %q wrongly", res.name)
		}
		seen[res] = true
		var ahead []*request
		for w := res.qhead; w != nil; w = w.next {
			r := w.req
			if r == nil || !live[r] || r.held || w.res != res || r.sess.ns != ns || !slices.Contains(r.names, res.name) {
				return fmt.Errorf("queue %q has a wrong waiter", res.name)
			}
			for _, a := range ahead {
				if before[[2]*request{r, a}] {
					return fmt.Errorf("requests %d and %d of sessions %d, %d are in opposite orders in two queues", a.id, r.id, a.sess.id, r.sess.id)
				}
				before[[2]*request{a, r}] = true
			}
			ahead = append(ahead, r)
			queued[r]++
		}
		if headGrantable(ns, res.qhead.req, heldOn) {
			return fmt.Errorf("head of queue %q (request %d of session %d) is grantable", res.name, res.qhead.req.id, res.qhead.req.sess.id)
		}
	}
	var p int
	for r := range live {
		if r.sess.ns == ns && !r.held {
			if queued[r] != len(r.names) {
				return fmt.Errorf("pending request %d of session %d is in %d queues, names %d", r.id, r.sess.id, queued[r], len(r.names))
			}
			p++
		}
	}
	if p != ns.nPending {
		return fmt.Errorf("%d pending, counts %d", p, ns.nPending)
	}
	for name, res := range ns.resources {
		if res.name != name || len(res.holders) == 0 && res.qhead == nil || res.inWork {
			return fmt.Errorf("resource %q is empty or left on the work list", name)
		}
		if len(res.holders) != len(heldOn[name]) || res.qhead != nil && !seen[res] {
			return fmt.Errorf("resource %q is not in the held list or queue list", name)
		}
	}
	return nil
}

// headGrantable is spec §2.5 over a scope, from the queues and the held list.
func headGrantable(ns *namespace, r *request, heldOn map[string][]*request) bool {
	for _, name := range r.names {
		res := ns.resources[name]
		if res == nil || res.qhead == nil || res.qhead.req != r {
			return false
		}
		for _, h := range heldOn[name] {
			if r.mode == Exclusive || h.mode == Exclusive {
				return false
			}
		}
		if r.maxHolders > 0 && len(heldOn[name]) >= int(r.maxHolders) { // SPEC §14
			return false
		}
	}
	return true
}

// FuzzApplyBytes feeds any bytes to a machine with state (richMachine, with
// the default and with generous limits): what does not decode must leave
// the state alone; what decodes must apply without panicking, keep the
// invariants, change nothing when it is rejected or a duplicate, and change
// nothing when applied a second time (a retry). Run it with
//
//	go test ./fsm/ -run '^$' -fuzz FuzzApplyBytes -fuzztime 60s -fuzzminimizetime 2s
//
// (with the default minimisation time of 60 s, minimising one new input
// grown from a 100 KiB seed takes the whole run). A failing input is
// written to testdata/fuzz/, which TestScenarios walks: move it elsewhere.
func FuzzApplyBytes(f *testing.F) {
	for _, b := range fuzzSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, generous := range []bool{false, true} {
			m, idx := richMachine(t, generous)
			ref, _ := richMachine(t, generous) // the same state, with a no-op entry at idx
			ref.Apply(idx, Entry{Cmd: &unknownEntry{entryType: 200}})
			before := m.Digest()
			ap, err := m.ApplyBytes(idx, data)
			if err != nil {
				if m.Digest() != before || err.Error() == "" {
					t.Fatalf("decode error %v changed the state", err)
				}
				continue
			}
			if ap.Result.Err != nil || ap.Result.Duplicate || ap.Result.Status == statusIgnored {
				if m.Digest() != ref.Digest() {
					t.Fatalf("result %+v changed more than the last index", ap.Result)
				}
			}
			if err := checkState(m.st); err != nil {
				t.Fatalf("%v (result %+v)", err, ap.Result)
			}
			seq, nsOf := map[uint64]uint64{}, map[uint64]string{}
			for _, s := range ref.Sessions() {
				seq[s.ID], nsOf[s.ID] = s.eventSeq, s.Namespace
			}
			e, _ := DecodeEntry(data)
			if err := checkEvents(m, e.Cmd, idx, ap, seq, nsOf, map[reqKey]bool{}); err != nil {
				t.Fatal(err)
			}
			// The same entry again, as a retry: it changes nothing (SPEC §6),
			// except that a second OpenSession opens a second session.
			once := m.Digest()
			ap2, _ := m.ApplyBytes(idx+1, data)
			if err := checkState(m.st); err != nil {
				t.Fatalf("after applying it twice: %v (%+v)", err, ap2.Result)
			}
			// A record write that does not release writes again (with
			// the new entry's index): it is not a retry.
			rewrite := false
			if sr, ok := e.Cmd.(*SetRecord); ok && !sr.Release && ap2.Result.Err == nil {
				rewrite = true
			}
			if m.st.lastIndex = idx; e.Cmd.Type() != typeOpenSession && !rewrite && (m.Digest() != once || len(ap2.Events) > 0) {
				t.Fatalf("applying it again changed the state: %+v then %+v, events %+v", ap.Result, ap2.Result, ap2.Events)
			}
		}
	})
}

// checkEvents checks the events and result of one entry: Seq per session
// grows by exactly 1 (seq holds the last of each); events go to a live
// session of the entry's namespace (nsOf) or to the session the entry
// ended; a grant's token is the entry's index; a request the machine said
// was finished (done) never comes back.
func checkEvents(m *Machine, cmd Command, idx uint64, ap Applied, seq map[uint64]uint64, nsOf map[uint64]string, done map[reqKey]bool) error {
	for _, e := range ap.Events {
		if e.Seq != seq[e.Session]+1 {
			return fmt.Errorf("event %+v: Seq %d after %d", e, e.Seq, seq[e.Session])
		}
		seq[e.Session] = e.Seq
		if m.st.sessions[e.Session] == nil && !(ends(cmd) && e.Session == sessionOf(cmd)) {
			return fmt.Errorf("event %+v to session %d, neither live nor ended by this entry", e, e.Session)
		}
		if ns, ok := nsOf[e.Session]; !ok || ns != nsOf[sessionOf(cmd)] {
			return fmt.Errorf("event %+v crosses from namespace %q to %q", e, nsOf[sessionOf(cmd)], ns)
		}
		k := reqKey{e.Session, e.RequestID}
		switch e.Kind {
		case EventGranted:
			if e.Token != idx || done[k] {
				return fmt.Errorf("grant %+v at index %d (finished before: %v)", e, idx, done[k])
			}
		case EventAborted, EventLockLost, EventNotAvailable:
			done[k] = true
		}
	}
	if r, ok := cmd.(*Release); ok && ap.Result.Status == StatusReleased {
		done[reqKey{r.Session, r.RequestID}] = true
	}
	if r, ok := cmd.(*SetRecord); ok && ap.Result.Status == StatusReleased {
		done[reqKey{r.Session, r.RequestID}] = true
	}
	if _, rec := cmd.(*SetRecord); !rec && ap.Result.Status == StatusGranted && !ap.Result.Duplicate && ap.Result.Token != idx {
		return fmt.Errorf("granted with token %d at index %d", ap.Result.Token, idx)
	}
	for k := range m.st.requests {
		if done[k] {
			return fmt.Errorf("finished request %d of session %d is live again", k.id, k.session)
		}
	}
	return nil
}

// sessionOf is the session a command names.
func sessionOf(cmd Command) uint64 {
	switch c := cmd.(type) {
	case *CloseSession:
		return c.Session
	case *ExpireSession:
		return c.Session
	case *Request:
		return c.Session
	case *Release:
		return c.Session
	case *Abort:
		return c.Session
	case *SetRecord:
		return c.Session
	}
	return 0
}

// ends reports whether cmd may end the session it names.
func ends(cmd Command) bool {
	switch cmd.(type) {
	case *CloseSession, *ExpireSession:
		return true
	}
	return false
}

func enc(tb testing.TB, c Command) []byte {
	b, err := EncodeEntry(Entry{Time: 42, Cmd: c})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// fuzzSeeds are valid encodings of every command type, with hostile but
// well-formed values, for the state of fuzzMachine.
func fuzzSeeds(tb testing.TB) [][]byte {
	const max = math.MaxUint64
	many := make([]string, 1000)
	for i := range many {
		many[i] = fmt.Sprint("n", i)
	}
	big := strings.Repeat("x", 100<<10)
	bad := "\xff\xfe"
	cmds := []Command{
		&OpenSession{Namespace: "n1", TTL: 10e9, Label: "host:1", ClientID: "c"},
		&OpenSession{Namespace: "n1", TTL: math.MaxInt64}, &OpenSession{Namespace: "n1", TTL: -1},
		&OpenSession{Namespace: bad, TTL: 10e9}, &OpenSession{Namespace: "n1", TTL: 10e9, Label: big},
		&CloseSession{Session: 1, Namespace: "n1"}, &CloseSession{Session: 3, Namespace: "n1"},
		&CloseSession{Session: max, Namespace: "n1"}, &ExpireSession{Session: 2}, &ExpireSession{Session: max},
		&Request{Session: 1, Namespace: "n1", RequestID: 6, Names: []string{"c"}},
		&Request{Session: 2, Namespace: "n1", RequestID: 5, Names: []string{"a", "b"}, Steal: true},
		&Request{Session: 2, Namespace: "n1", RequestID: 5, Names: []string{"b"}, Mode: Shared, IfAvailable: true},
		&Request{Session: 2, Namespace: "n1", RequestID: 9, Names: []string{"z"}},
		&Request{Session: 1, Namespace: "n1", RequestID: 0, Names: []string{"a"}},
		&Request{Session: 1, Namespace: "n1", RequestID: max, Names: []string{"a"}, AckBelow: max},
		&Request{Session: max, Namespace: "n1", RequestID: 1, Names: []string{"a"}},
		&Request{Session: 1, Namespace: "n1", RequestID: 7, Names: many},
		&Request{Session: 1, Namespace: "n1", RequestID: 7, Names: []string{bad}},
		&Request{Session: 1, Namespace: "n1", RequestID: 7, Names: []string{big}, Steal: true},
		&Request{Session: 1, Namespace: "n1", RequestID: 7, Names: []string{"-x"}},
		&Request{Session: 1, Namespace: "n1", RequestID: 7, Names: []string{"a", "a"}},
		&Request{Session: 1, Namespace: "n1", RequestID: 7, Names: []string{"a"}, Mode: 7},
		&Request{Session: 1, Namespace: "n1", RequestID: 7, Names: []string{"a"}, Steal: true, IfAvailable: true, Signal: true},
		&Release{Session: 1, Namespace: "n1", RequestID: 1}, &Release{Session: 1, Namespace: "n1", RequestID: 1, Token: max},
		&Release{Session: 1, Namespace: "n1", RequestID: 4, AckBelow: max}, &Release{Session: 2, Namespace: "n1", RequestID: 1},
		&Abort{Session: 2, Namespace: "n1", RequestID: 3, Reason: "r"}, &Abort{Session: 1, Namespace: "n1", RequestID: 1},
		&Abort{Session: 1, Namespace: "n1", RequestID: 0}, &Abort{Session: 2, Namespace: "n1", RequestID: max, AckBelow: max},
		&Abort{Session: 2, Namespace: "n1", RequestID: 20, Reason: big},
		&SetLimits{Limits: DefaultLimits()}, &SetLimits{Limits: Limits{}},
		&SetMember{Member: Member{ID: "node1"}, Remove: true}, &SetMember{Member: Member{ID: "n2", HTTPAddr: big}},
		&SetMember{Member: Member{ID: bad, RaftAddr: "x"}},
		&SetLimits{Limits: Limits{math.MaxInt64, math.MaxInt64, 1, 1, 1, 1, 1, 1, 1, math.MaxInt64, 1, defaultMaxRecordBytes, defaultMaxNamespaceRecordBytes}},
		&SetLimits{Limits: Limits{math.MaxInt64, math.MaxInt64, 1, 1, 1, 1, 1, 1, 1, math.MaxInt64, 1, 1, math.MaxInt64}},
		// Records (session 1 holds "a" exclusively with token 4) and semaphores.
		&SetRecord{Session: 1, Namespace: "n1", RequestID: 1, Token: 4, Name: "a", Value: []byte("v")},
		&SetRecord{Session: 1, Namespace: "n1", RequestID: 1, Token: 4, Name: "a", Value: []byte("v"), Release: true, AckBelow: 1},
		&SetRecord{Session: 1, Namespace: "n1", RequestID: 1, Token: 4, Name: "a", Delete: true, Release: true},
		&SetRecord{Session: 1, Namespace: "n1", RequestID: 1, Token: 5, Name: "a", Value: []byte(big)},
		&SetRecord{Session: 2, Namespace: "n1", RequestID: 1, Token: max, Name: bad},
		&SetRecord{Session: 2, Namespace: "n1", RequestID: 2, Token: 7, Name: "b", Value: []byte{0, 0xff}},
		&Request{Session: 1, Namespace: "n1", RequestID: 7, Names: []string{"s", "t"}, Mode: Shared, MaxHolders: 1},
		&Request{Session: 2, Namespace: "n1", RequestID: 7, Names: []string{"b"}, Mode: Shared, MaxHolders: 2},
		&Request{Session: 2, Namespace: "n1", RequestID: 7, Names: []string{"s"}, MaxHolders: math.MaxUint32},
		// The move entries (move_cmd.go): "n1" is slot 2796.
		&SetGroup{Group: 0}, &SetGroup{Group: 3}, &SetGroup{Group: math.MaxUint16},
		&Freeze{Slots: []uint16{2796}, Epoch: 1, To: 1}, &Freeze{Slots: []uint16{0, 2796, Slots - 1}, Epoch: math.MaxUint32, To: 2},
		&Freeze{Slots: []uint16{2796}, Epoch: 0, To: 1}, &Freeze{Slots: []uint16{2796}, Epoch: 1, To: 0},
		&ImportChunk{Slots: []uint16{5}, Epoch: 1, Seq: 0, Data: []byte{tagSession, 1, 0}},
		&ImportChunk{Slots: []uint16{2796}, Epoch: 2, Seq: 1, Data: []byte(big)},
		&Import{Slots: []uint16{5}, Epoch: 1, N: 0, FloorL: max, SHA256: chunkSum(nil)},
		&Import{Slots: []uint16{2796}, Epoch: 1, N: 3, FloorL: 4},
		&Reject{Slots: []uint16{5}, Epoch: 1}, &Reject{Slots: []uint16{2796}, Epoch: 9},
		&Unfreeze{Slots: []uint16{2796}, Epoch: 1}, &Unfreeze{Slots: []uint16{2796}, Epoch: 0},
		&Drop{Slots: []uint16{2796}, Epoch: 1}, &Drop{Slots: []uint16{1, 2}, Epoch: 1},
	}
	var out [][]byte
	for _, c := range cmds {
		out = append(out, enc(tb, c))
	}
	return append(out, []byte{1, 200, 1, 0}, []byte{1, 200, 0, 0}, []byte{2, 4, 0, 0}, nil, []byte("garbage"))
}

// FuzzDecodeEntry: decoding never panics, and what decodes encodes back to
// an entry that decodes the same.
func FuzzDecodeEntry(f *testing.F) {
	for _, b := range fuzzSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := DecodeEntry(data)
		if err != nil {
			return
		}
		if _, unknown := e.Cmd.(*unknownEntry); unknown {
			return
		}
		b, err := EncodeEntry(e)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", e, err)
		}
		e2, err := DecodeEntry(b)
		if err != nil || !reflect.DeepEqual(e, e2) {
			t.Fatalf("re-encoding changes the entry: %+v -> %+v (%v)", e, e2, err)
		}
	})
}

// checkSessionOrder checks the id-ordered session list against the map and,
// outside a snapshot, that no copy-on-write copy is left behind.
func checkSessionOrder(st *state) error {
	n := 0
	var prev *session
	for s := st.sessHead; s != nil; s = s.newer {
		if st.sessions[s.id] != s || s.older != prev || prev != nil && prev.id >= s.id {
			return fmt.Errorf("session %d is out of the id order", s.id)
		}
		if !st.cow.active && s.frozen != nil {
			return fmt.Errorf("session %d keeps a frozen copy outside a snapshot", s.id)
		}
		for r := s.liveHead; r != nil; r = r.snext {
			if !st.cow.active && r.frozen != nil {
				return fmt.Errorf("request %d of session %d keeps a frozen copy outside a snapshot", r.id, s.id)
			}
		}
		prev, n = s, n+1
	}
	if !st.cow.active && len(st.cow.ress) != 0 {
		return fmt.Errorf("%d resources keep a frozen copy outside a snapshot", len(st.cow.ress))
	}
	if st.sessTail != prev || n != len(st.sessions) {
		return fmt.Errorf("the id order has %d sessions, the map %d", n, len(st.sessions))
	}
	for _, ns := range st.namespaces {
		if ns.cow != st.cow || !st.cow.active && ns.frozen != nil {
			return fmt.Errorf("namespace %s has a foreign or leftover copy-on-write", ns.name)
		}
	}
	return nil
}

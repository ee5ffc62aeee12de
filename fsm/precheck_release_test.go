package fsm

import "testing"

// Precheck refuses a release of a request id that the session has no
// record of with exactly the error Apply gives it, and lets through every
// release Apply answers otherwise: a live request (held, or queued: Apply
// says abort it), a remembered outcome, an id below the floor, another
// session or namespace.
func TestPrecheckReleaseOfAnUnknownRequest(t *testing.T) {
	m, apply := twoSessions(t)
	req := func(s, id uint64, name string) {
		t.Helper()
		if r := apply(&Request{Session: s, Namespace: "n", RequestID: id, Names: []string{name}}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	req(1, 1, "a") // granted
	req(2, 1, "a") // queued
	req(1, 2, "b") // granted, then released below
	if r := apply(&Release{Session: 1, Namespace: "n", RequestID: 2}); r.Err != nil {
		t.Fatal(r.Err)
	}
	req(1, 5, "c")
	if r := apply(&Release{Session: 1, Namespace: "n", RequestID: 5, AckBelow: 4}); r.Err != nil { // floor 4
		t.Fatal(r.Err)
	}

	for _, c := range []*Release{
		{Session: 1, Namespace: "n", RequestID: 7}, // never made
		{Session: 1, Namespace: "n", RequestID: 0}, // never made either
		{Session: 2, Namespace: "n", RequestID: 2}, // session 1's, not 2's
	} {
		pre := m.Precheck(c)
		if pre == nil {
			t.Fatalf("release %+v: Precheck lets it through; want it refused", *c)
		}
		got := apply(c).Err
		e, ok := got.(*Error)
		if !ok || e.Code != pre.Code || e.Msg != pre.Msg {
			t.Fatalf("release %+v: Precheck says %v (code %v), Apply %v: want the same", *c, pre, pre.Code, got)
		}
	}
	for name, c := range map[string]*Release{
		"held":               {Session: 1, Namespace: "n", RequestID: 1},
		"queued":             {Session: 2, Namespace: "n", RequestID: 1},
		"released, recorded": {Session: 1, Namespace: "n", RequestID: 5},
		"below the floor":    {Session: 1, Namespace: "n", RequestID: 3},
		"unknown session":    {Session: 99, Namespace: "n", RequestID: 7},
		"another namespace":  {Session: 1, Namespace: "other", RequestID: 7},
	} {
		if err := m.Precheck(c); err != nil {
			t.Errorf("%s: Precheck refuses %+v: %v; want Apply to decide", name, *c, err)
		}
	}
}

// Precheck refuses a record write that the state makes certain to be
// refused with exactly Apply's error (CodeNotHolder, naming the current
// token), and lets through every write Apply may accept.
func TestPrecheckSetRecord(t *testing.T) {
	m, apply := twoSessions(t)
	for _, c := range []*Request{
		{Session: 1, Namespace: "n", RequestID: 1, Names: []string{"a"}},               // granted, token 3
		{Session: 2, Namespace: "n", RequestID: 1, Names: []string{"a"}},               // queued
		{Session: 1, Namespace: "n", RequestID: 2, Names: []string{"b"}, Mode: Shared}, // granted shared
		{Session: 1, Namespace: "n", RequestID: 3, Names: []string{"c"}},               // granted, token 6
	} {
		if r := apply(c); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if r := apply(&SetRecord{Session: 1, Namespace: "n", RequestID: 3, Token: 6, Name: "c", Value: []byte("v"), Release: true}); r.Err != nil {
		t.Fatal(r.Err)
	}
	for name, c := range map[string]*SetRecord{
		"wrong token":        {Session: 1, Namespace: "n", RequestID: 1, Token: 4, Name: "a"},
		"another name":       {Session: 1, Namespace: "n", RequestID: 1, Token: 3, Name: "b"},
		"shared":             {Session: 1, Namespace: "n", RequestID: 2, Token: 5, Name: "b"},
		"never made":         {Session: 1, Namespace: "n", RequestID: 9, Token: 3, Name: "a"},
		"released, written":  {Session: 1, Namespace: "n", RequestID: 3, Token: 6, Name: "c", Value: []byte("w")},
		"released, other tk": {Session: 1, Namespace: "n", RequestID: 3, Token: 5, Name: "c", Release: true},
	} {
		pre := m.Precheck(c)
		if pre == nil {
			t.Fatalf("%s: Precheck lets %+v through; want it refused", name, *c)
		}
		got := apply(c).Err
		e, ok := got.(*Error)
		if !ok || e.Code != CodeNotHolder || e.Code != pre.Code || e.Msg != pre.Msg || e.Token != pre.Token {
			t.Fatalf("%s: Precheck says %v (code %v), Apply %v: want the same NotHolder", name, pre, pre.Code, got)
		}
	}
	for name, c := range map[string]*SetRecord{
		"holder":            {Session: 1, Namespace: "n", RequestID: 1, Token: 3, Name: "a"},
		"queued":            {Session: 2, Namespace: "n", RequestID: 1, Token: 99, Name: "a"},
		"a retried release": {Session: 1, Namespace: "n", RequestID: 3, Token: 6, Name: "c", Value: []byte("v"), Release: true},
		"unknown session":   {Session: 99, Namespace: "n", RequestID: 1, Token: 3, Name: "a"},
		"another namespace": {Session: 1, Namespace: "other", RequestID: 1, Token: 3, Name: "a"},
	} {
		if err := m.Precheck(c); err != nil {
			t.Errorf("%s: Precheck refuses %+v: %v; want Apply to decide", name, *c, err)
		}
	}
	if err := DefaultLimits().Check(&SetRecord{Session: 1, Namespace: "n", RequestID: 1, Name: "-x"}); codeOf(err) != CodeNotSupported {
		t.Errorf("Limits.Check of a reserved record name: %v", err)
	}
}

// twoSessions is a machine with sessions 1 and 2 open in namespace "n",
// and a function that applies a command at the next index.
func twoSessions(t *testing.T) (*Machine, func(Command) Result) {
	m := New()
	openWithSecret(t, m, 1, "n", "s1") // session 1
	openWithSecret(t, m, 2, "n", "s2") // session 2
	idx := uint64(2)
	return m, func(c Command) Result {
		t.Helper()
		idx++
		return m.Apply(idx, Entry{Cmd: c}).Result
	}
}

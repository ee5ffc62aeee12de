package fsm

import (
	"reflect"
	"testing"
)

// A request retried after its grant (the first answer lost in a leader
// change) is answered as a duplicate, and the duplicate carries the
// records the grant carried: the client learns its grant from it, and
// with it what its predecessor left (docs/chaos.md, finding 7). Before,
// the duplicate said granted with no records, and the client believed the
// name had none.
func TestDuplicateGrantCarriesTheRecords(t *testing.T) {
	m := New()
	i := uint64(0)
	apply := func(c Command) Applied {
		t.Helper()
		i++
		ap := m.Apply(i, Entry{Time: int64(i) * 1000, Cmd: c})
		if ap.Result.Err != nil {
			t.Fatalf("entry %d %T: %v", i, c, ap.Result.Err)
		}
		return ap
	}
	s1 := apply(&OpenSession{Namespace: "ns", TTL: 10e9}).Result.Session
	s2 := apply(&OpenSession{Namespace: "ns", TTL: 10e9}).Result.Session
	tok := apply(&Request{Session: s1, Namespace: "ns", RequestID: 1, Names: []string{"a"}}).Result.Token
	apply(&SetRecord{Session: s1, Namespace: "ns", RequestID: 1, Token: tok, Name: "a", Value: []byte("left by s1")})
	req := &Request{Session: s2, Namespace: "ns", RequestID: 1, Names: []string{"a"}}
	if st := apply(req).Result.Status; st != StatusQueued {
		t.Fatalf("s2's request: %v, want queued", st)
	}
	ap := apply(&Release{Session: s1, Namespace: "ns", RequestID: 1})
	var granted *Event
	for k := range ap.Events {
		if e := &ap.Events[k]; e.Session == s2 && e.Kind == EventGranted {
			granted = e
		}
	}
	if granted == nil || len(granted.Records) != 1 || string(granted.Records[0].Value) != "left by s1" {
		t.Fatalf("s2's grant event: %+v", granted)
	}
	dup := apply(req).Result
	if !dup.Duplicate || dup.Status != StatusGranted || dup.Token != granted.Token || !reflect.DeepEqual(dup.Records, granted.Records) {
		t.Fatalf("the retried request: %+v; want a duplicate, granted with token %d and the grant's records %+v", dup, granted.Token, granted.Records)
	}
}

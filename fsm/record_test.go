package fsm

import (
	"reflect"
	"strings"
	"testing"
)

// QueryMatching is Query's lines of the names match accepts, with the
// records of every matching name of the namespace (held, queued or not),
// by name, at the applied index; Record reads one record.
func TestQueryMatching(t *testing.T) {
	m := New()
	idx := uint64(0)
	apply := func(c Command) Result {
		t.Helper()
		idx++
		r := m.Apply(idx, Entry{Time: 7, Cmd: c}).Result
		if r.Err != nil {
			t.Fatalf("%s: %v", fmtCmd(c), r.Err)
		}
		return r
	}
	apply(&OpenSession{Namespace: "n", TTL: 1e9})                                                         // 1
	apply(&Request{Session: 1, Namespace: "n", RequestID: 1, Names: []string{"job/b", "job/a", "other"}}) // 2
	apply(&SetRecord{Session: 1, Namespace: "n", RequestID: 1, Token: 2, Name: "job/b", Value: []byte("B")})
	apply(&SetRecord{Session: 1, Namespace: "n", RequestID: 1, Token: 2, Name: "other", Value: []byte("O")})
	apply(&SetRecord{Session: 1, Namespace: "n", RequestID: 1, Token: 2, Name: "job/a", Value: []byte("A"), Release: true})
	apply(&Request{Session: 1, Namespace: "n", RequestID: 2, Names: []string{"job/b"}, Mode: Shared, MaxHolders: 4}) // 6

	prefix := func(n string) bool { return strings.HasPrefix(n, "job/") }
	q, recs, at := m.QueryMatching("n", prefix)
	if at != 6 || len(q.Held) != 1 || q.Held[0].Name != "job/b" || q.Held[0].MaxHolders != 4 || len(q.Pending) != 0 {
		t.Fatalf("QueryMatching at %d: %+v", at, q)
	}
	if len(q.Records) != 1 || q.Records[0].Name != "job/b" {
		t.Fatalf("the query's records are those of the names it reports: %+v", q.Records)
	}
	if len(recs) != 2 || recs[0].Name != "job/a" || recs[1].Name != "job/b" || string(recs[0].Value) != "A" || recs[0].Index != 5 || recs[0].Token != 2 || recs[0].Time != 7 {
		t.Fatalf("records of every matching name: %+v", recs)
	}
	all, recs, _ := m.QueryMatching("n", nil)
	if !reflect.DeepEqual(all, m.Query("n")) || len(recs) != 3 {
		t.Fatalf("QueryMatching(nil) = %+v, %d records; Query = %+v", all, len(recs), m.Query("n"))
	}
	if rec, at, ok := m.Record("n", "other"); !ok || string(rec.Value) != "O" || at != 6 {
		t.Fatalf("Record = %+v, %d, %v", rec, at, ok)
	}
	if _, _, ok := m.Record("n", "none"); ok {
		t.Fatal("a record of a name without one")
	}
	if q, recs, at := m.QueryMatching("elsewhere", nil); len(q.Held)+len(q.Pending)+len(recs) != 0 || at != 6 {
		t.Fatalf("another namespace: %+v %+v %d", q, recs, at)
	}
}

// With KeepChanges off (the default) an entry allocates nothing for
// changes: a contended grant and release cycle allocates fewer objects
// than with it on.
func TestChangesOffCostNothing(t *testing.T) {
	allocs := func(keep bool) float64 {
		m := New()
		m.KeepChanges(keep)
		m.Apply(1, Entry{Cmd: &OpenSession{Namespace: "n", TTL: 1e9}})
		m.Apply(2, Entry{Cmd: &OpenSession{Namespace: "n", TTL: 1e9}})
		idx, id := uint64(3), uint64(1)
		m.Apply(idx, Entry{Cmd: &Request{Session: 1, Namespace: "n", RequestID: id, Names: []string{"x"}}})
		return testing.AllocsPerRun(100, func() {
			idx++
			m.Apply(idx, Entry{Cmd: &Request{Session: 2, Namespace: "n", RequestID: id, Names: []string{"x"}}})
			idx++
			if ap := m.Apply(idx, Entry{Cmd: &Release{Session: 1, Namespace: "n", RequestID: id}}); (ap.Changes != nil) != keep {
				t.Fatalf("keep %v: changes %+v", keep, ap.Changes)
			}
			id++
			idx++
			m.Apply(idx, Entry{Cmd: &Request{Session: 1, Namespace: "n", RequestID: id, Names: []string{"x"}}})
			idx++
			m.Apply(idx, Entry{Cmd: &Release{Session: 2, Namespace: "n", RequestID: id - 1}})
		})
	}
	if off, on := allocs(false), allocs(true); off >= on {
		t.Fatalf("allocations per cycle: %v with changes off, %v on", off, on)
	}
}

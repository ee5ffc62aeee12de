package fsm

import (
	"fmt"
	"reflect"
	"runtime"
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
// changes: a contended grant and release cycle allocates fewer bytes than
// with it on, and the machine reserves no change buffer. With it on the
// changes are carved from the buffer: no allocation of their own.
func TestChangesOffCostNothing(t *testing.T) {
	measure := func(keep bool) (allocs, bytes float64, m *Machine) {
		m = New()
		m.KeepChanges(keep)
		m.Apply(1, Entry{Cmd: &OpenSession{Namespace: "n", TTL: 1e9}})
		m.Apply(2, Entry{Cmd: &OpenSession{Namespace: "n", TTL: 1e9}})
		idx, id := uint64(3), uint64(1)
		m.Apply(idx, Entry{Cmd: &Request{Session: 1, Namespace: "n", RequestID: id, Names: []string{"x"}}})
		cycle := func() {
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
		}
		allocs = testing.AllocsPerRun(100, cycle)
		const cycles = 2000
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range cycles {
			cycle()
		}
		runtime.ReadMemStats(&after)
		return allocs, float64(after.TotalAlloc-before.TotalAlloc) / cycles, m
	}
	offAllocs, offBytes, off := measure(false)
	onAllocs, onBytes, on := measure(true)
	if offBytes >= onBytes || offAllocs > onAllocs {
		t.Fatalf("per cycle: %v allocations, %.0f bytes with changes off; %v, %.0f on", offAllocs, offBytes, onAllocs, onBytes)
	}
	if off.changeBuf != nil || on.changeBuf == nil {
		t.Fatalf("change buffer: %d with changes off, %d on", cap(off.changeBuf), cap(on.changeBuf))
	}
	if onAllocs != offAllocs {
		t.Fatalf("changes cost %v allocations per cycle of their own: want 0 (they are carved from the machine's buffer)", onAllocs-offAllocs)
	}
}

// The changes an entry returns stay as they were when later entries are
// applied: the machine carves them from a shared buffer, and neither the
// next entries nor an entry with more changes than the buffer has room
// for (a session that ends holding 600 locks) may write over them.
func TestChangesOutliveLaterEntries(t *testing.T) {
	m := New()
	m.KeepChanges(true)
	type kept struct{ got, want []Change }
	var all []kept
	idx := uint64(0)
	apply := func(c Command) Applied {
		idx++
		ap := m.Apply(idx, Entry{Cmd: c})
		if ap.Result.Err != nil {
			t.Fatal(ap.Result.Err)
		}
		all = append(all, kept{ap.Changes, append([]Change(nil), ap.Changes...)})
		if len(ap.Changes) > 0 {
			ap.Changes = append(ap.Changes, Change{Kind: ChangeGranted, Namespace: "written by a caller"}) // must not reach the buffer
		}
		return ap
	}
	s1 := apply(&OpenSession{Namespace: "n", TTL: 1e9}).Result.Session
	s2 := apply(&OpenSession{Namespace: "n", TTL: 1e9}).Result.Session
	for i := range 600 {
		apply(&Request{Session: s1, Namespace: "n", RequestID: uint64(i + 1), Names: []string{fmt.Sprint("x", i)}})
	}
	apply(&CloseSession{Session: s1, Namespace: "n"}) // 600 releases and an end in one entry
	for i := range 700 {
		apply(&Request{Session: s2, Namespace: "n", RequestID: uint64(2*i + 1), Names: []string{"y"}})
		apply(&Release{Session: s2, Namespace: "n", RequestID: uint64(2*i + 1)})
	}
	for i, k := range all {
		if !reflect.DeepEqual(k.got, k.want) {
			t.Fatalf("entry %d: its changes became %+v, were %+v", i+1, k.got, k.want)
		}
	}
	if n := len(all[602].want); n != 601 {
		t.Fatalf("the close made %d changes, want 601", n)
	}
}

package fsm

import (
	"bytes"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// Benchmarks of the lock manager alone: no Raft, no network. The numbers
// and the commands that produce them are in docs/benchmarks.md.

func benchOpen(b *testing.B, m *Machine, idx *uint64, ns string) uint64 {
	*idx++
	ap := m.Apply(*idx, Entry{Time: 1, Cmd: &OpenSession{Namespace: ns, TTL: 10e9}})
	if ap.Result.Err != nil {
		b.Fatal(ap.Result.Err)
	}
	return ap.Result.Session
}

// BenchmarkUncontended: one request and one release per iteration on a
// name nobody else wants, decoded from bytes as Raft hands them over. The
// entries/s metric counts both entries.
func BenchmarkUncontended(b *testing.B) {
	m := New()
	var idx uint64
	const sessions = 64
	var ids [sessions]uint64
	for i := range ids {
		ids[i] = benchOpen(b, m, &idx, "default")
	}
	names := make([]string, sessions)
	for i := range names {
		names[i] = "resource-" + strconv.Itoa(i)
	}
	// Pre-encode so the benchmark measures decoding and applying, not
	// encoding (that is the proposer's cost).
	const ring = 4096
	reqs := make([][]byte, 0, ring)
	rels := make([][]byte, 0, ring)
	for i := 0; i < ring; i++ {
		s := i % sessions
		id := uint64(i/sessions + 1)
		rq, _ := EncodeEntry(Entry{Time: 1, Cmd: &Request{Session: ids[s], Namespace: "default", RequestID: id, Names: []string{names[s]}, AckBelow: id}})
		rl, _ := EncodeEntry(Entry{Time: 1, Cmd: &Release{Session: ids[s], Namespace: "default", RequestID: id, AckBelow: id}})
		reqs, rels = append(reqs, rq), append(rels, rl)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%ring == 0 && i > 0 {
			// Request ids restart: a new round of sessions keeps them unique.
			b.StopTimer()
			for s := range ids {
				idx++
				m.Apply(idx, Entry{Cmd: &CloseSession{Session: ids[s], Namespace: "default"}})
				ids[s] = benchOpen(b, m, &idx, "default")
			}
			for j := 0; j < ring; j++ {
				s := j % sessions
				id := uint64(j/sessions + 1)
				reqs[j], _ = EncodeEntry(Entry{Time: 1, Cmd: &Request{Session: ids[s], Namespace: "default", RequestID: id, Names: []string{names[s]}, AckBelow: id}})
				rels[j], _ = EncodeEntry(Entry{Time: 1, Cmd: &Release{Session: ids[s], Namespace: "default", RequestID: id, AckBelow: id}})
			}
			b.StartTimer()
		}
		idx++
		if ap, err := m.ApplyBytes(idx, reqs[i%ring]); err != nil || ap.Result.Status != StatusGranted {
			b.Fatalf("request: %v %+v", err, ap.Result)
		}
		idx++
		if ap, err := m.ApplyBytes(idx, rels[i%ring]); err != nil || ap.Result.Status != StatusReleased {
			b.Fatalf("release: %v %+v", err, ap.Result)
		}
	}
	b.ReportMetric(float64(2*b.N)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkExpireBigSession expires a session that holds 10,000 locks and
// has 1,000 queued requests, while another session waits behind each of
// its locks (so the expiry also grants 10,000 locks).
func BenchmarkExpireBigSession(b *testing.B) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		m := New()
		var idx uint64
		l := DefaultLimits()
		idx++
		m.Apply(idx, Entry{Cmd: &SetLimits{Limits: l}})
		big := benchOpen(b, m, &idx, "default")
		waiter := benchOpen(b, m, &idx, "default")
		other := benchOpen(b, m, &idx, "default")
		for j := 0; j < 10_000; j++ {
			idx++
			m.Apply(idx, Entry{Cmd: &Request{Session: big, Namespace: "default", RequestID: uint64(j + 1), Names: []string{"held-" + strconv.Itoa(j)}}})
			idx++
			m.Apply(idx, Entry{Cmd: &Request{Session: waiter, Namespace: "default", RequestID: uint64(j + 1), Names: []string{"held-" + strconv.Itoa(j)}}})
		}
		for j := 0; j < 1_000; j++ {
			idx++
			m.Apply(idx, Entry{Cmd: &Request{Session: other, Namespace: "default", RequestID: uint64(j + 1), Names: []string{"busy-" + strconv.Itoa(j)}}})
			idx++
			m.Apply(idx, Entry{Cmd: &Request{Session: big, Namespace: "default", RequestID: uint64(20_000 + j), Names: []string{"busy-" + strconv.Itoa(j)}}})
		}
		if st := m.Stats(); st.Held != 11_000 || st.Pending != 11_000 {
			b.Fatalf("setup: %+v", st)
		}
		idx++
		b.StartTimer()
		ap := m.Apply(idx, Entry{Cmd: &ExpireSession{Session: big}})
		b.StopTimer()
		if st := m.Stats(); st.Held != 11_000 || st.Pending != 0 || len(ap.Events) != 21_001 {
			b.Fatalf("after expiry: %+v, %d events", st, len(ap.Events))
		}
	}
}

// BenchmarkMillionLocks builds 1,000,000 held locks over 100,000 sessions
// and reports the live heap, the time to encode a snapshot (BeginSnapshot,
// the pause on raft's FSM goroutine, then Encode, what Persist does) while
// acquire+release pairs are applied meanwhile (the longest Apply among
// them), and the time to Restore the state. Run it with -benchtime=1x.
func BenchmarkMillionLocks(b *testing.B) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		m := New()
		var idx uint64
		const sessions, per = 100_000, 10
		for s := 0; s < sessions; s++ {
			id := benchOpen(b, m, &idx, "default")
			for j := 0; j < per; j++ {
				idx++
				ap := m.Apply(idx, Entry{Time: int64(idx), Cmd: &Request{Session: id, Namespace: "default", RequestID: uint64(j + 1),
					Names: []string{"lock/" + strconv.Itoa(s) + "/" + strconv.Itoa(j)}, AckBelow: uint64(j + 1)}})
				if ap.Result.Status != StatusGranted {
					b.Fatalf("%+v", ap.Result)
				}
			}
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		heap := float64(after.HeapAlloc-before.HeapAlloc) / (1 << 20)

		// While the snapshot encodes, apply acquire+release pairs of
		// another session as raft would: the longest Apply is the pause a
		// snapshot costs an entry.
		pid := benchOpen(b, m, &idx, "default")
		t0 := time.Now()
		sn := m.BeginSnapshot()
		begin := time.Since(t0)
		encoded := make(chan []byte)
		go func() {
			b, err := sn.Encode()
			if err != nil {
				panic(err)
			}
			encoded <- b
		}()
		var snap []byte
		var longest time.Duration
		pairs := 0
		for snap == nil {
			select {
			case snap = <-encoded:
				continue
			default:
			}
			for _, cmd := range []Command{
				&Request{Session: pid, Namespace: "default", RequestID: uint64(pairs + 1), Names: []string{"probe"}, AckBelow: uint64(pairs + 1)},
				&Release{Session: pid, Namespace: "default", RequestID: uint64(pairs + 1)},
			} {
				idx++
				t1 := time.Now()
				m.Apply(idx, Entry{Time: int64(idx), Cmd: cmd})
				longest = max(longest, time.Since(t1))
			}
			pairs++
		}
		persist := time.Since(t0)
		t0 = time.Now()
		m2 := New()
		if err := m2.Restore(bytes.NewReader(snap)); err != nil {
			b.Fatal(err)
		}
		restore := time.Since(t0)
		if got, want := m2.Stats(), m.Stats(); got.Held != want.Held || got.Sessions != want.Sessions || got.LastIndex != sn.Index() {
			b.Fatalf("restored %+v, want %+v at index %d", got, want, sn.Index())
		}
		b.ReportMetric(heap, "heap-MiB")
		b.ReportMetric(persist.Seconds(), "snapshot-s")
		b.ReportMetric(float64(begin.Microseconds())/1e3, "begin-ms")
		b.ReportMetric(float64(longest.Microseconds())/1e3, "longest-apply-ms")
		b.ReportMetric(float64(pairs), "pairs-while-encoding")
		b.ReportMetric(restore.Seconds(), "restore-s")
		b.ReportMetric(float64(len(snap))/(1<<20), "snapshot-MiB")
		runtime.KeepAlive(m)
	}
}

// BenchmarkSlotSessions: the sessions of one slot of 10,000 sessions, in
// a group of 100,000 sessions over 1,000 namespaces (what the server
// reads, on raft's FSM goroutine, for a Freeze, an Import or an
// Unfreeze; groups.md §8.2).
func BenchmarkSlotSessions(b *testing.B) {
	m := New()
	var idx uint64
	const hot = "hot"
	for i := 0; i < 10000; i++ {
		benchOpen(b, m, &idx, hot)
	}
	for i := 0; i < 90000; i++ {
		ns := "ns-" + strconv.Itoa(i%999)
		if Slot(ns) == Slot(hot) {
			ns += "-x"
		}
		benchOpen(b, m, &idx, ns)
	}
	slots := []uint16{Slot(hot)}
	b.ResetTimer()
	for b.Loop() {
		if got := m.SlotSessions(slots); len(got) < 10000 {
			b.Fatalf("%d sessions", len(got))
		}
	}
}

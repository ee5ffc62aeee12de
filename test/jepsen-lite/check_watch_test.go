package main

import (
	"strings"
	"testing"
)

// Hand-made watch histories (watch.go): the log holds changes at 10, 11
// and 13; the end marker is at 13.

func granted(name string, session, token uint64) []WChange {
	return []WChange{{Kind: "granted", Names: []string{name}, Mode: "exclusive", Session: session, Request: 1, Token: token}}
}

var watchLogEntries = []struct {
	index   uint64
	changes []WChange
}{
	{10, granted("rec-0", 1, 10)},
	{11, []WChange{{Kind: "record-set", Names: []string{"rec-0"}, Session: 1, Request: 1, Token: 10, Rec: rec("rec-0", "a", 10, 11)}}},
	{13, append(granted("mutex-0", 2, 13), WChange{Kind: "session-ended", Session: 3, Cause: "session-expired"})},
}

// watchHistory builds a history: the log (from index 5 on), the marker,
// and one watch p (prefix) per stream, each a list of events: a snapshot
// ("s<index>", "r<index>" for a Resync; with the records the log shows
// at its index, none with a final "!") or the index of a log entry whose
// changes it received (other changes with a final "!").
func watchHistory(prefix string, streams ...[]string) []Op {
	b := new(hb)
	t := int64(1)
	for i, s := range streams {
		p := 20 + i
		b.add(t, Op{Process: p, Type: "event", F: "watch", Result: "start", Value: prefix})
		var last uint64
		for _, ev := range s {
			t++
			var idx uint64
			switch ev[0] {
			case 's', 'r':
				idx = parseU(ev[1:])
				var recs []RecInfo
				for _, e := range watchLogEntries {
					for _, c := range e.changes {
						if e.index <= idx && c.Rec != nil && strings.HasPrefix(c.Rec.Name, prefix) && ev[len(ev)-1] != '!' {
							recs = append(recs, *c.Rec)
						}
					}
				}
				b.add(t, Op{Process: p, Type: "event", F: "watch", Result: "snapshot", Index: idx, Resync: ev[0] == 'r', Value: prefix, Records: recs})
			default:
				idx = parseU(ev)
				var cs []WChange
				for _, e := range watchLogEntries {
					if e.index == idx {
						for _, c := range e.changes {
							if selects(prefix, c) {
								cs = append(cs, c)
							}
						}
					}
				}
				if ev[len(ev)-1] == '!' { // other changes than the log's
					cs = granted("mutex-1", 9, idx)
				}
				b.add(t, Op{Process: p, Type: "event", F: "watch", Result: "changes", Index: idx, Changes: cs, Value: prefix})
			}
			last = idx
		}
		b.add(200+int64(i), Op{Process: p, Type: "event", F: "watch", Result: "end", Index: max(last, 13), Value: prefix})
	}
	b.add(150, Op{Process: finalProcess, Type: "ok", F: "watch-marker", Index: 13})
	b.add(300, Op{Process: finalProcess, Type: "ok", F: "log-range", Index: 5, To: 14, Value: "node 0"})
	for _, e := range watchLogEntries {
		b.add(301, Op{Process: finalProcess, Type: "event", F: "log", Index: e.index, Changes: e.changes})
	}
	return b.end(400)
}

func parseU(s string) uint64 {
	var n uint64
	for _, c := range s {
		if c < '0' || c > '9' {
			break
		}
		n = 10*n + uint64(c-'0')
	}
	return n
}

func TestWatchGood(t *testing.T) {
	wantValid(t, watchHistory("", []string{"s9", "10", "11", "13"}, []string{"s10", "11", "13"}, []string{"s12", "13"}), cWatch)
	wantValid(t, watchHistory("rec-", []string{"s9", "10", "11"}), cWatch)
	// A Resync after COMPACTED: allowed, counted, checked from its index.
	ops := watchHistory("", []string{"s9", "10", "r12", "13"})
	wantValid(t, ops, cWatch)
	if r := check(t, ops, cWatch); !strings.Contains(strings.Join(r.Notes, "\n"), "1 Resync after COMPACTED") {
		t.Errorf("notes: %v", r.Notes)
	}
	// A watch from before the log's history is compared from its start.
	if r := check(t, watchHistory("", []string{"s2", "10", "11", "13"}), cWatch); !r.Valid || !strings.Contains(strings.Join(r.Notes, "\n"), "before the log's history") {
		t.Errorf("valid %v, violations %v, notes %v", r.Valid, r.Violations, r.Notes)
	}
}

func TestWatchGap(t *testing.T) {
	wantInvalid(t, watchHistory("", []string{"s9", "10", "13"}), cWatch, "a gap: index 11")
	// A watch that ends at 13 (its LastIndex) without having received 13.
	wantInvalid(t, watchHistory("", []string{"s9", "10", "11"}), cWatch, "a gap: index 13")
	// The other watches see the gap too, even where the log does not reach.
	ops := watchHistory("", []string{"s9", "10", "11", "13"}, []string{"s9", "10", "13"})
	wantInvalid(t, ops, cWatch, "watch p21 against watch p20, indexes 10..13: a gap: index 11")
}

func TestWatchDuplicate(t *testing.T) {
	wantInvalid(t, watchHistory("", []string{"s9", "10", "11", "11", "13"}), cWatch, "changes at index 11 after index 11: a duplicate")
	wantInvalid(t, watchHistory("", []string{"s9", "10", "11", "r10", "11", "13"}), cWatch, "behind the index 11")
	wantInvalid(t, watchHistory("", []string{"s9", "10", "11", "s12", "13"}), cWatch, "not a Resync")
}

func TestWatchWrongChanges(t *testing.T) {
	wantInvalid(t, watchHistory("", []string{"s9", "10", "11!", "13"}), cWatch, "index 11 differs")
	wantInvalid(t, watchHistory("", []string{"s9", "10", "11", "12!", "13"}), cWatch, "index 12")
	// A watch of rec- that received the session's end (not its selection).
	ops := watchHistory("rec-", []string{"s9", "10", "11"})
	for i, op := range ops {
		if op.F == "watch" && op.Index == 11 {
			ops[i].Changes = append(ops[i].Changes, WChange{Kind: "session-ended", Session: 3})
		}
	}
	wantInvalid(t, ops, cWatch, "index 11 differs")
}

func TestWatchMustReachTheMarker(t *testing.T) {
	ops := watchHistory("", []string{"s9", "10"})
	for i, op := range ops {
		if op.F == "watch" && op.Result == "end" {
			ops[i].Index = 10
		}
	}
	wantInvalid(t, ops, cWatch, "not the end marker at 13")
}

func TestWatchSnapshotRecords(t *testing.T) {
	wantInvalid(t, watchHistory("", []string{"s12!", "13"}), cWatch, `watch p20: its snapshot at index 12 has no record for rec-0, but the log shows the record "a" (token 10, index 11)`)
	if r := check(t, watchHistory("", []string{"s12", "13"}), cWatch); !strings.Contains(strings.Join(r.Notes, "\n"), "1 records of watch snapshots compared") {
		t.Errorf("notes: %v", r.Notes)
	}
}

// The locks of a watch's snapshot must be the namespace's state in the
// log right after its index, filtered by the watch's selection.
func TestWatchSnapshotLocks(t *testing.T) {
	holder := QLock{Name: "rec-0", Mode: "exclusive", Session: 1, Request: 1, Token: 10}
	other := QLock{Name: "mutex-0", Mode: "exclusive", Session: 2, Request: 1, Token: 13}
	waiter := QLock{Name: "rec-0", Mode: "shared", Session: 4, Request: 2}
	build := func(prefix string, got []QLock, logHeld []QLock) []Op {
		ops := watchHistory(prefix, []string{"s12", "13"})
		for i, op := range ops {
			if op.F == "watch" && op.Result == "snapshot" {
				ops[i].Held, ops[i].Pending = got, []QLock{waiter}
			}
		}
		return append(ops, Op{Time: 302, Process: finalProcess, Type: "event", F: "log-state", Index: 12, Held: logHeld, Pending: []QLock{waiter}})
	}
	ops := build("", []QLock{holder, other}, []QLock{holder, other})
	wantValid(t, ops, cWatch)
	if r := check(t, ops, cWatch); !strings.Contains(strings.Join(r.Notes, "\n"), "1 watch snapshots' locks compared") {
		t.Errorf("notes: %v", r.Notes)
	}
	// A watch of rec- sees only rec-0.
	wantValid(t, build("rec-", []QLock{holder}, []QLock{holder, other}), cWatch)
	// A snapshot that misses a holder, or shows a stale token.
	wantInvalid(t, build("", []QLock{holder}, []QLock{holder, other}), cWatch, "its snapshot at index 12 has held [rec-0 exclusive s1 r1 token 10], but the log's state there is [rec-0 exclusive s1 r1 token 10, mutex-0 exclusive s2 r1 token 13]")
	stale := holder
	stale.Token = 9
	wantInvalid(t, build("rec-", []QLock{stale}, []QLock{holder}), cWatch, "has held [rec-0 exclusive s1 r1 token 9]")
}

// A request whose outcome the client does not know because it gave its
// session up (jeopardy) is settled once a watch received the session's
// end, and so is a lock held in that session: porcupine then need not
// keep them pending to the end of the history.
func TestWatchSettlesJeopardy(t *testing.T) {
	const why = "lockcluster: AbortError: session lost: no heartbeat acknowledged for a whole TTL (5s)"
	build := func(watched bool) *history {
		b := new(hb)
		b.add(0, Op{Process: 1, Type: "invoke", F: "acquire", Hold: "1/1", Workload: wMutex, Names: []string{"mutex-0"}, Session: 4})
		b.add(20, Op{Process: 1, Type: "info", F: "acquire", Hold: "1/1", Names: []string{"mutex-0"}, Session: 4, Error: why})
		b.grant(2, "2/1", "mutex-1", 1, 2, 0, 5, 3)
		b.add(10, Op{Process: 2, Type: "event", F: "lost", Hold: "2/1", Names: []string{"mutex-1"}, Result: "session", Value: why})
		if watched {
			b.add(30, Op{Process: 20, Type: "event", F: "watch", Result: "changes", Index: 9,
				Changes: []WChange{{Kind: "session-ended", Session: 4, Cause: "session-expired"}}})
			b.add(40, Op{Process: 20, Type: "event", F: "watch", Result: "changes", Index: 12,
				Changes: []WChange{{Kind: "session-ended", Session: 5, Cause: "session-expired"}}})
		}
		return analyse(b.end(100))
	}
	hs := build(false)
	if s, r := hs.byID["1/1"].settledBy(), hs.byID["2/1"].releasedBy(); s != 0 || r != 0 {
		t.Errorf("without a watch: settled by %d, released by %d; want 0, 0", s, r)
	}
	hs = build(true)
	if s, r := hs.byID["1/1"].settledBy(), hs.byID["2/1"].releasedBy(); s != ms(30) || r != ms(40) {
		t.Errorf("with a watch: settled by %d, released by %d; want %d, %d", s, r, ms(30), ms(40))
	}
}

// Every watch skipped index 12 with a Resync (as all do when the
// namespace moves to another group), and no log was read: the timeline
// has a hole there, so a Resync snapshot after it (which shows the record
// set at 12) is not held to what the watches' changes before the hole
// said (the record set at 11). With the log read, the same snapshot is
// compared, and a wrong one is caught.
func TestWatchResyncHoleIsNotCompared(t *testing.T) {
	saved := watchLogEntries
	defer func() { watchLogEntries = saved }()
	watchLogEntries = append(append(watchLogEntries[:0:0], saved[:2]...),
		struct {
			index   uint64
			changes []WChange
		}{12, []WChange{{Kind: "record-set", Names: []string{"rec-0"}, Session: 1, Request: 1, Token: 10, Rec: rec("rec-0", "b", 10, 12)}}},
		saved[2])
	noLog := func(ops []Op) []Op {
		var out []Op
		for _, op := range ops {
			if op.F != "log" && op.F != "log-range" {
				out = append(out, op)
			}
		}
		return out
	}
	streams := [][]string{{"s9", "10", "11", "r13"}, {"s9", "10", "11", "r13"}}
	if r := check(t, noLog(watchHistory("", streams...)), cWatch); !r.Valid {
		t.Errorf("a Resync snapshot after a hole no watch covered was compared: %v", r.Violations)
	}
	if r := check(t, watchHistory("", streams...), cWatch); !r.Valid {
		t.Errorf("with the log: %v", r.Violations)
	}
	wantInvalid(t, watchHistory("", []string{"s9", "10", "11", "r13!"}), cWatch, `its snapshot at index 13 has no record for rec-0, but the log shows the record "b"`)
}

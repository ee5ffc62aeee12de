package main

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// Checker (10) watch: what the watches received (watch.go) against each
// other and against the log.
//
//   - each watch starts with a snapshot; a later snapshot must be a Resync
//     (after COMPACTED: counted and reported), at an index no lower than
//     the last one the watch had received; the stream after a snapshot is
//     checked from the snapshot's index. Within a segment (a snapshot and
//     what follows it) indexes strictly grow: no duplicate, no reordering;
//   - each segment, from its snapshot's index to the last index the watch
//     received (Watcher.LastIndex at the end; before a Resync its last
//     event's), equals the log's history over that range: every entry of
//     the log with a change the watch selects, at its index, with the same
//     changes in the same order, and nothing else: no gap, no duplicate,
//     no change the log does not have. The log's history is a stopped
//     node's, from its newest snapshot on (watch.go); what lies before it
//     is compared between watches only, and the notes say so;
//   - two watches agree where their segments overlap (a watch of every
//     name, filtered by the other's selection, against the other);
//   - every watch reaches the marker written at the end, and none stops
//     with an error;
//   - the records of each snapshot are those the log shows at its index
//     (for the names whose record changed in the log's or the watches'
//     history before it);
//   - the locks of each snapshot (held, in grant order, and pending, in
//     queue order) are those of the namespace's state right after that
//     index, as the stopped node's replay computes it, for the names the
//     watch selects.

const cWatch = "watch"

// wEvent is one watch event, or one entry of the log.
type wEvent struct {
	index   uint64
	changes []WChange
}

// segment is a watch's stream from one snapshot on.
type segment struct {
	from, to uint64 // the snapshot's index; the last index covered
	resync   bool
	events   []wEvent
}

type watchLog struct {
	process int
	prefix  string
	segs    []*segment
	ended   bool
	last    uint64 // Watcher.LastIndex at the end
	errs    []string
}

// watchEvents groups the history's watch events by watch.
func watchEvents(hs *history, r *checkResult) []*watchLog {
	byProc := map[int]*watchLog{}
	var out []*watchLog
	get := func(op Op) *watchLog {
		w := byProc[op.Process]
		if w == nil {
			w = &watchLog{process: op.Process, prefix: op.Value}
			byProc[op.Process] = w
			out = append(out, w)
		}
		return w
	}
	for _, op := range hs.ops {
		if op.F != "watch" {
			continue
		}
		w := get(op)
		var seg *segment
		if len(w.segs) > 0 {
			seg = w.segs[len(w.segs)-1]
		}
		switch op.Result {
		case "snapshot":
			switch {
			case seg == nil && op.Resync:
				r.fail("watch p%d: its first snapshot (index %d) is marked Resync", w.process, op.Index)
			case seg != nil && !op.Resync:
				r.fail("watch p%d: a second snapshot (index %d) that is not a Resync", w.process, op.Index)
			case seg != nil && op.Index < seg.to:
				r.fail("watch p%d: Resync snapshot at index %d, behind the index %d it had received: the changes between would come twice", w.process, op.Index, seg.to)
			}
			w.segs = append(w.segs, &segment{from: op.Index, to: op.Index, resync: op.Resync})
		case "changes":
			if seg == nil {
				r.fail("watch p%d: changes at index %d before any snapshot", w.process, op.Index)
				continue
			}
			if op.Index <= seg.to {
				r.fail("watch p%d: changes at index %d after index %d: a duplicate or out of order (%s)", w.process, op.Index, seg.to, describeChanges(op.Changes))
				continue
			}
			seg.events = append(seg.events, wEvent{index: op.Index, changes: op.Changes})
			seg.to = op.Index
		case "end":
			w.ended, w.last = true, op.Index
			if seg != nil && op.Index > seg.to {
				seg.to = op.Index
			}
		case "error":
			w.errs = append(w.errs, op.Error)
		}
	}
	return out
}

func describeChanges(cs []WChange) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = c.String()
	}
	return strings.Join(parts, "; ")
}

// filterEvents keeps the events (and changes) that a watch of prefix
// selects, with index in (from, to].
func filterEvents(evs []wEvent, prefix string, from, to uint64) []wEvent {
	var out []wEvent
	for _, e := range evs {
		if e.index <= from || e.index > to {
			continue
		}
		var cs []WChange
		for _, c := range e.changes {
			if selects(prefix, c) {
				cs = append(cs, c)
			}
		}
		if len(cs) > 0 {
			out = append(out, wEvent{index: e.index, changes: cs})
		}
	}
	return out
}

// compareStreams reports where got differs from want (both in index
// order, over the same range): a gap, an extra entry, other changes.
func compareStreams(r *checkResult, what string, want, got []wEvent) (compared int) {
	i, j := 0, 0
	for i < len(want) || j < len(got) {
		switch {
		case j == len(got) || (i < len(want) && want[i].index < got[j].index):
			r.fail("%s: a gap: index %d (%s) is missing", what, want[i].index, describeChanges(want[i].changes))
			i++
		case i == len(want) || got[j].index < want[i].index:
			r.fail("%s: index %d (%s) is not in the reference", what, got[j].index, describeChanges(got[j].changes))
			j++
		default:
			if !reflect.DeepEqual(want[i].changes, got[j].changes) {
				r.fail("%s: index %d differs: want %s, got %s", what, want[i].index, describeChanges(want[i].changes), describeChanges(got[j].changes))
			}
			compared++
			i++
			j++
		}
	}
	return compared
}

func checkWatch(hs *history) checkResult {
	r := checkResult{Name: cWatch, Valid: true}
	ws := watchEvents(hs, &r)
	if len(ws) == 0 {
		r.note("no watch ran")
		return r
	}
	var marker uint64
	var logFrom, logTo uint64
	haveLog := false
	var log []wEvent
	for _, op := range hs.ops {
		switch {
		case op.F == "watch-marker" && op.Type == "ok":
			marker = op.Index
		case op.F == "watch-marker":
			r.note("no end marker: %s", op.Value)
		case op.F == "log-range" && op.Type == "ok":
			haveLog, logFrom, logTo = true, op.Index, op.To
			r.note("the log's history: %s", op.Value)
		case op.F == "log-range":
			r.note("the log's history was not read: %s", op.Value)
		case op.F == "log":
			log = append(log, wEvent{index: op.Index, changes: op.Changes})
		}
	}
	sort.SliceStable(log, func(i, j int) bool { return log[i].index < log[j].index })

	resyncs, events, vsLog, vsWatch := 0, 0, 0, 0
	for _, w := range ws {
		sel := "every name"
		if w.prefix != "" {
			sel = "prefix " + w.prefix
		}
		for _, e := range w.errs {
			r.fail("watch p%d (%s) stopped with an error: %s", w.process, sel, e)
		}
		if !w.ended {
			r.fail("watch p%d (%s) has no end in the history", w.process, sel)
		}
		if len(w.segs) == 0 {
			r.fail("watch p%d (%s) received no snapshot", w.process, sel)
			continue
		}
		if marker > 0 && w.last < marker {
			r.fail("watch p%d (%s) reached index %d, not the end marker at %d", w.process, sel, w.last, marker)
		}
		n := 0
		for k, s := range w.segs {
			n += len(s.events)
			if s.resync {
				resyncs++
			}
			if !haveLog {
				continue
			}
			from, to := max(s.from, logFrom-1), min(s.to, logTo)
			if from >= to {
				r.note("watch p%d segment %d (indexes %d..%d) lies outside the log's history (%d..%d): compared with the other watches only",
					w.process, k, s.from, s.to, logFrom, logTo)
				continue
			}
			if from > s.from {
				r.note("watch p%d segment %d starts at index %d, before the log's history: compared with the log from %d", w.process, k, s.from, from+1)
			}
			what := fmt.Sprintf("watch p%d (%s) against the log, indexes %d..%d", w.process, sel, from+1, to)
			vsLog += compareStreams(&r, what, filterEvents(log, w.prefix, from, to), filterEvents(s.events, "", from, to))
		}
		events += n
		r.note("watch p%d (%s): %d events in %d segments (%d Resync), last index %d", w.process, sel, n, len(w.segs), len(w.segs)-1, w.last)
	}
	// Pairs: a watch of every name against every other watch.
	for a, wa := range ws {
		if wa.prefix != "" {
			continue
		}
		for b, wb := range ws {
			if b == a || (wb.prefix == "" && b < a) {
				continue
			}
			for _, sa := range wa.segs {
				for _, sb := range wb.segs {
					from, to := max(sa.from, sb.from), min(sa.to, sb.to)
					if from >= to {
						continue
					}
					what := fmt.Sprintf("watch p%d against watch p%d, indexes %d..%d", wb.process, wa.process, from+1, to)
					vsWatch += compareStreams(&r, what, filterEvents(sa.events, wb.prefix, from, to), filterEvents(sb.events, "", from, to))
				}
			}
		}
	}
	r.note("%d watches, %d events, %d Resync after COMPACTED; %d events compared with the log, %d between watches; end marker at index %d",
		len(ws), events, resyncs, vsLog, vsWatch, marker)
	checkSnapshotRecords(hs, &r)
	checkSnapshotLocks(hs, &r)
	return r
}

// checkSnapshotLocks: the held and pending locks of each watch snapshot at
// index I are the namespace's, filtered by the watch's selection, in the
// state the log's replay reached right after I (F "log-state").
func checkSnapshotLocks(hs *history, r *checkResult) {
	states := map[uint64]Op{}
	for _, op := range hs.ops {
		if op.F == "log-state" {
			states[op.Index] = op
		}
	}
	checked, outside := 0, 0
	for _, op := range hs.ops {
		if op.F != "watch" || op.Result != "snapshot" {
			continue
		}
		if op.Held == nil && op.Pending == nil && !strings.HasPrefix(op.Error, "0 held, 0 pending") {
			continue // a history recorded before snapshots kept their locks
		}
		st, ok := states[op.Index]
		if !ok {
			outside++
			continue
		}
		checked++
		for _, part := range []struct {
			what      string
			got, want []QLock
		}{{"held", op.Held, st.Held}, {"pending", op.Pending, st.Pending}} {
			want := selectLocks(part.want, op.Value)
			if !sameLocks(part.got, want) {
				r.fail("watch p%d: its snapshot at index %d has %s %s, but the log's state there is %s", op.Process, op.Index, part.what, describeLocks(part.got), describeLocks(want))
			}
		}
	}
	r.note("%d watch snapshots' locks compared with the log's state at their index (%d taken outside the log's history)", checked, outside)
}

// selectLocks keeps the locks of the names a watch of prefix selects.
func selectLocks(in []QLock, prefix string) []QLock {
	var out []QLock
	for _, l := range in {
		if strings.HasPrefix(l.Name, prefix) {
			out = append(out, l)
		}
	}
	return out
}

func sameLocks(a, b []QLock) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func describeLocks(ls []QLock) string {
	if len(ls) == 0 {
		return "none"
	}
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = fmt.Sprintf("%s %s s%d r%d token %d", l.Name, l.Mode, l.Session, l.Request, l.Token)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// checkSnapshotRecords: the records of each watch snapshot at index I are
// the records the log (or another watch) shows at I, for every name the
// watch selects whose record changed after the timeline's start.
func checkSnapshotRecords(hs *history, r *checkResult) {
	tl := timeline(hs)
	if tl == nil {
		return
	}
	checked := 0
	for _, op := range hs.ops {
		if op.F != "watch" || op.Result != "snapshot" {
			continue
		}
		if len(op.Records) == 0 && op.Error != "" && !strings.HasSuffix(op.Error, " 0 records") {
			continue // a history recorded before snapshots kept their records
		}
		got := map[string]RecInfo{}
		for _, rec := range op.Records {
			got[rec.Name] = rec
		}
		for _, name := range sortedKeys(tl.changes) {
			if !strings.HasPrefix(name, op.Value) {
				continue
			}
			want, ok := tl.at(name, op.Index)
			if !ok {
				continue
			}
			checked++
			g, have := got[name]
			switch {
			case want == nil && !have:
			case want != nil && have && g.Value == want.Value && g.Token == want.Token && g.Index == want.Index:
			default:
				gp := &g
				if !have {
					gp = nil
				}
				r.fail("watch p%d: its snapshot at index %d has %s for %s, but the log shows %s", op.Process, op.Index, describeRec(gp), name, describeRec(want))
			}
		}
	}
	r.note("%d records of watch snapshots compared with the log's", checked)
}

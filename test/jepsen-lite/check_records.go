package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Checkers (8) records-linearizability and (9) records-fencing, over the
// records workload's operations (records.go).
//
// records-linearizability: porcupine, one register per name. The state is
// the name's record value ("" for none). A write (rec-set, rec-delete, a
// release with a record) that succeeded sets it within its invocation; one
// refused with ErrNotHolder changed nothing and is left out; one whose
// outcome is unknown may have set it, or not, at any time from its invoke
// until the cluster had certainly stopped accepting it: the holder's
// release confirmed (and no loss before it), the cluster's word that the
// lock was lost (releasedBy), or the grant of a later holder of the name
// (a write is checked against the grant's token when it is applied, so
// once a newer grant is applied it is refused), else the end of the
// history. A write invoked after such a point cannot have been applied and
// is left out. Reads are Client.Record's answers and the record each grant
// carried (its value at the grant, which lies within the acquire).
//
// records-fencing: every record seen (a write's answer, a read, a grant's)
//   - has a value that a writer of the history wrote, under a grant whose
//     token is the record's token, in a write that was not refused;
//   - was written at an index after that token, with no grant of the name
//     in between: the writer still held the name when the write was
//     applied (tokens are Raft indexes);
//   - agrees with every other record seen at the same index;
//   - when a grant carried it: is the record the log (or a watch of every
//     name) shows as the name's at the grant's index, its token
//     (a new holder sees what its predecessor left; none when there was
//     none);
//
// and the successful writes of a name, in index order, have tokens that
// only grow, and follow real time (a write acknowledged before another was
// invoked has the lower index). A write refused with ErrNotHolder is
// fine: it is counted. A retried release with record that finds its write
// applied is answered without the index: its value and token are checked,
// the index-based checks skip it.

const (
	cRecLin   = "records-linearizability"
	cRecFence = "records-fencing"
)

// recOp is one records operation of the history.
type recOp struct {
	f        string // rec-set, rec-delete, release (with a record), rec-read, grant (the record a grant carried)
	name     string
	process  int
	hold     *hold  // writes and grants
	value    string // written (invoke); "" for a delete
	invoke   int64
	complete int64  // 0: no completion in the history
	outcome  string // ok, fail, info; "" without completion
	result   string
	rec      *RecInfo // the answer
	err      string
}

func (o *recOp) write() bool { return o.f == "rec-set" || o.f == "rec-delete" || o.f == "release" }

func (o *recOp) String() string {
	who := fmt.Sprintf("p%d", o.process)
	if o.hold != nil {
		who = o.hold.id
	}
	switch {
	case o.f == "grant":
		return fmt.Sprintf("the grant of %s (token %d)", who, o.hold.token)
	case o.f == "rec-read":
		return fmt.Sprintf("a read by %s", who)
	case o.f == "rec-delete":
		return fmt.Sprintf("a delete by %s", who)
	case o.f == "release":
		return fmt.Sprintf("the release with record %q of %s", o.value, who)
	}
	return fmt.Sprintf("the write %q of %s", o.value, who)
}

// recordOps collects the records operations, in invoke order.
func recordOps(hs *history) []*recOp {
	var out []*recOp
	open := map[string]*recOp{}
	for _, op := range hs.ops {
		key := fmt.Sprintf("%d %s %s", op.Process, op.F, op.Hold)
		switch {
		case op.F == "acquire" && op.Type == "ok" && op.Result == "granted" && op.Rec != nil && len(op.Names) == 1:
			h := hs.byID[op.Hold]
			if h == nil {
				continue
			}
			out = append(out, &recOp{f: "grant", name: op.Names[0], process: op.Process, hold: h, invoke: h.invoke, complete: op.Time, outcome: "ok", rec: op.Rec})
		case op.F != "rec-set" && op.F != "rec-delete" && op.F != "rec-read" && op.F != "release":
		case op.Type == "invoke":
			if len(op.Names) != 1 || (op.F == "release" && op.Rec == nil) {
				continue
			}
			o := &recOp{f: op.F, name: op.Names[0], process: op.Process, hold: hs.byID[op.Hold], invoke: op.Time}
			if op.Rec != nil {
				o.value = op.Rec.Value
			}
			if o.write() && o.hold == nil {
				continue
			}
			open[key] = o
			out = append(out, o)
		default:
			o := open[key]
			if o == nil {
				continue
			}
			delete(open, key)
			o.complete, o.outcome, o.result, o.rec, o.err = op.Time, op.Type, op.Result, op.Rec, op.Error
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].invoke < out[j].invoke })
	return out
}

// recNames lists the names records operations touch.
func recNames(ops []*recOp) []string {
	seen := map[string]bool{}
	var out []string
	for _, o := range ops {
		if !seen[o.name] {
			seen[o.name] = true
			out = append(out, o.name)
		}
	}
	sort.Strings(out)
	return out
}

// writeBound is when the cluster had certainly stopped accepting a write
// of hold h on name (hs.last+1: not known): see the file comment.
func writeBound(hs *history, h *hold, name string, grants []*hold) int64 {
	end := hs.last + 1
	if h.relOK && h.lostAt == 0 && h.relDone > 0 {
		end = h.relDone
	}
	if rb := h.releasedBy(); rb != 0 && rb < end {
		end = rb
	}
	for _, g := range grants {
		if g.token > h.token && g.complete < end {
			end = g.complete
		}
	}
	return end
}

type regIn struct {
	Kind  string // write, maybe, read
	Value string
	Desc  string
}

type regOut struct{ Value string }

var registerModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{""} },
	Step: func(state, input, output any) []any {
		st, in, out := state.(string), input.(regIn), output.(regOut)
		switch in.Kind {
		case "write":
			return []any{in.Value}
		case "maybe":
			if st == in.Value {
				return []any{st}
			}
			return []any{st, in.Value}
		case "read":
			if out.Value == st {
				return []any{st}
			}
		}
		return nil
	},
	Equal: stringStateEqual,
	Hash:  stringStateHash,
	DescribeOperation: func(input, output any) string {
		in, out := input.(regIn), output.(regOut)
		if in.Kind == "read" {
			return fmt.Sprintf("%s -> %q", in.Desc, out.Value)
		}
		return fmt.Sprintf("%s %q", in.Desc, in.Value)
	},
	DescribeState: func(s any) string {
		if s.(string) == "" {
			return "no record"
		}
		return fmt.Sprintf("%q", s.(string))
	},
}

// regOps builds the porcupine history of one name's register.
func regOps(hs *history, ops []*recOp, name string) (out []porcupine.Operation, unknown, skipped int) {
	grants := hs.grantsOf(name)
	lanes := map[int]int{}
	lane := func(p int, bg bool) int {
		k := 2 * p
		if bg {
			k++
		}
		if _, ok := lanes[k]; !ok {
			lanes[k] = len(lanes)
		}
		return lanes[k]
	}
	for _, o := range ops {
		if o.name != name {
			continue
		}
		switch {
		case !o.write():
			if o.outcome != "ok" || o.rec == nil {
				continue
			}
			v := ""
			if !o.rec.None {
				v = o.rec.Value
			}
			desc := "read"
			if o.f == "grant" {
				desc = "grant " + o.hold.id
			}
			out = append(out, porcupine.Operation{ClientId: lane(o.process, false), Input: regIn{Kind: "read", Desc: desc}, Output: regOut{Value: v},
				Call: o.invoke, Return: o.complete})
		case o.outcome == "ok":
			out = append(out, porcupine.Operation{ClientId: lane(o.process, false), Input: regIn{Kind: "write", Value: o.value, Desc: o.f + " " + o.hold.id},
				Output: regOut{}, Call: o.invoke, Return: o.complete})
		case o.outcome == "fail":
			// refused (not-holder): nothing changed
		default:
			end := writeBound(hs, o.hold, name, grants)
			if end <= o.invoke {
				skipped++
				continue
			}
			unknown++
			out = append(out, porcupine.Operation{ClientId: lane(o.process, true), Input: regIn{Kind: "maybe", Value: o.value, Desc: o.f + "? " + o.hold.id},
				Output: regOut{}, Call: o.invoke, Return: end})
		}
	}
	return out, unknown, skipped
}

func checkRecordsLin(hs *history, o checkOptions) checkResult {
	return checkRecordsLinOps(hs, recordOps(hs), o)
}

func checkRecordsLinOps(hs *history, ops []*recOp, o checkOptions) checkResult {
	r := checkResult{Name: cRecLin, Valid: true}
	names := recNames(ops)
	if len(names) == 0 {
		r.note("no records operations in the history")
		return r
	}
	model := registerModel.ToModel()
	var checked []string
	for _, name := range names {
		pops, unknown, skipped := regOps(hs, ops, name)
		res, info := porcupine.CheckOperationsVerbose(model, pops, o.LinTimeout)
		checked = append(checked, fmt.Sprintf("%s (%d ops, %d writes of unknown outcome, %d more left out: invoked after a newer grant or the release)", name, len(pops), unknown, skipped))
		r.porcupine(o, model, res, info, name, len(pops), "the record is not linearizable as a register", "records-linearizability-")
	}
	r.note("checked %s", strings.Join(checked, ", "))
	return r
}

func checkRecordsFencing(hs *history) checkResult {
	return checkRecordsFencingOps(hs, recordOps(hs))
}

// recTimeline is what the log (or a watch of every name) says of a
// name's record: its changes by index, from index from on.
type recTimeline struct {
	from    uint64
	changes map[string][]recChange // by name, in index order
	// covered are the index ranges whose every change the timeline has:
	// the log's history, and each watch's segments (from a snapshot to its
	// last change before the next). Between them lie holes: the indexes
	// every watch skipped with a Resync (COMPACTED, or the resume after a
	// move of the namespace to another group) where no log was read.
	covered [][2]uint64 // sorted, disjoint
}

type recChange struct {
	index uint64
	rec   *RecInfo // nil: deleted
}

// timeline gathers the record changes of the log's history ("log" ops)
// and of every watch of every name (after its first snapshot): the watch
// checker holds them equal where they overlap.
func timeline(hs *history) *recTimeline {
	tl := &recTimeline{changes: map[string][]recChange{}}
	seen := map[uint64]bool{}
	from, set := uint64(0), false
	started := map[int]bool{}
	var spans [][2]uint64
	seg := map[int]int{} // each watch's open segment in spans
	add := func(index uint64, cs []WChange) {
		if seen[index] {
			return
		}
		seen[index] = true
		for _, c := range cs {
			if c.Rec == nil || (c.Kind != "record-set" && c.Kind != "record-deleted") {
				continue
			}
			var rec *RecInfo
			if c.Kind == "record-set" {
				rec = c.Rec
			}
			tl.changes[c.Rec.Name] = append(tl.changes[c.Rec.Name], recChange{index: index, rec: rec})
		}
	}
	for _, op := range hs.ops {
		switch {
		case op.F == "log-range" && op.Type == "ok":
			if !set || op.Index-1 < from {
				from, set = op.Index-1, true
			}
			spans = append(spans, [2]uint64{op.Index, op.To})
		case op.F == "log":
			add(op.Index, op.Changes)
		case op.F == "watch" && op.Value == "" && op.Result == "snapshot":
			if !started[op.Process] {
				started[op.Process] = true
				if !set || op.Index < from {
					from, set = op.Index, true
				}
			}
			seg[op.Process] = len(spans)
			spans = append(spans, [2]uint64{op.Index, op.Index})
		case op.F == "watch" && op.Value == "" && op.Result == "changes" && started[op.Process]:
			add(op.Index, op.Changes)
			if k := seg[op.Process]; op.Index > spans[k][1] {
				spans[k][1] = op.Index
			}
		}
	}
	if len(seen) == 0 {
		return nil
	}
	for _, cs := range tl.changes {
		sort.Slice(cs, func(i, j int) bool { return cs[i].index < cs[j].index })
	}
	tl.from = from
	tl.covered = mergeSpans(spans)
	return tl
}

// mergeSpans sorts index ranges and merges those that overlap or touch.
func mergeSpans(spans [][2]uint64) [][2]uint64 {
	sort.Slice(spans, func(i, j int) bool { return spans[i][0] < spans[j][0] })
	var out [][2]uint64
	for _, s := range spans {
		if n := len(out); n > 0 && s[0] <= out[n-1][1]+1 {
			out[n-1][1] = max(out[n-1][1], s[1])
			continue
		}
		out = append(out, s)
	}
	return out
}

// covers reports whether the timeline has every change of indexes
// after..to (a hole in between: a change there may be missing).
func (tl *recTimeline) covers(after, to uint64) bool {
	if tl.covered == nil {
		return true // a timeline built by hand (tests): whole
	}
	for _, c := range tl.covered {
		if c[0] <= after+1 && to <= c[1] {
			return true
		}
	}
	return false
}

// at returns the name's record as entry index left it (ok false: the
// timeline has no change of it between its start and index). A grant
// sees the record as its own entry left it: a release with a record
// writes and releases before the grant it lets in.
func (tl *recTimeline) at(name string, index uint64) (rec *RecInfo, ok bool) {
	cs := tl.changes[name]
	i := sort.Search(len(cs), func(i int) bool { return cs[i].index > index }) - 1
	switch {
	case i < 0 && tl.from == 0 && tl.covers(0, index):
		return nil, true // the log from its first entry: no record yet
	case i < 0 || cs[i].index <= tl.from:
		return nil, false
	case !tl.covers(cs[i].index, index):
		return nil, false // a change after it may lie in a hole
	}
	return cs[i].rec, true
}

func checkRecordsFencingOps(hs *history, ops []*recOp) checkResult {
	r := checkResult{Name: cRecFence, Valid: true}
	names := recNames(ops)
	if len(names) == 0 {
		r.note("no records operations in the history")
		return r
	}
	if tl := timeline(hs); tl != nil {
		checkGrantRecords(hs, ops, tl, &r)
	} else {
		r.note("no log or watch in the history: the records grants carried are checked by porcupine only")
	}
	type counts struct{ ok, refused, unknown int }
	noIndex := 0
	stats := map[string]*counts{}
	for _, f := range []string{"rec-set", "rec-delete", "release", "rec-read", "grant"} {
		stats[f] = &counts{}
	}
	for _, name := range names {
		grants := hs.grantsOf(name)
		tokens := make([]*hold, 0, len(grants))
		for _, g := range grants {
			if g.exclusive() {
				tokens = append(tokens, g)
			}
		}
		sort.Slice(tokens, func(i, j int) bool { return tokens[i].token < tokens[j].token })
		// between returns a grant of the name with a token in (lo, hi).
		between := func(lo, hi uint64) *hold {
			i := sort.Search(len(tokens), func(i int) bool { return tokens[i].token > lo })
			if i < len(tokens) && tokens[i].token < hi {
				return tokens[i]
			}
			return nil
		}
		writer := map[string]*recOp{}
		for _, o := range ops {
			if o.name == name && o.write() && o.value != "" {
				writer[o.value] = o
			}
		}
		seen := map[uint64]*recOp{}
		refusedSeen := map[*recOp]bool{}
		var sets []*recOp
		for _, o := range ops {
			if o.name != name {
				continue
			}
			c := stats[o.f]
			switch o.outcome {
			case "ok":
				c.ok++
			case "fail":
				if o.result == notHolder {
					c.refused++
				}
			default:
				c.unknown++
			}
			if o.outcome != "ok" || o.rec == nil || o.rec.None {
				continue
			}
			rec := o.rec
			if o.write() && rec.Index == 0 {
				// A retried release with record that found its write
				// applied (its first answer lost) is answered without the
				// index (Lock.ReleaseWithRecord): only what it wrote is
				// checked.
				noIndex++
				if rec.Token != o.hold.token || rec.Value != o.value {
					r.fail("%s: %s at %s was answered with the record %q, token %d", name, o, hs.at(o.complete), rec.Value, rec.Token)
				}
				continue
			}
			if o.write() {
				if rec.Token != o.hold.token {
					r.fail("%s: %s at %s wrote with token %d, but its grant's token is %d", name, o, hs.at(o.complete), rec.Token, o.hold.token)
				}
				if rec.Value != o.value {
					r.fail("%s: %s at %s was answered with the record %q", name, o, hs.at(o.complete), rec.Value)
				}
				sets = append(sets, o)
			}
			if prev := seen[rec.Index]; prev != nil && (prev.rec.Value != rec.Value || prev.rec.Token != rec.Token) {
				r.fail("%s: index %d holds the record %q (token %d) as %s saw it, but %q (token %d) as %s saw it", name, rec.Index,
					prev.rec.Value, prev.rec.Token, prev, rec.Value, rec.Token, o)
			} else if prev == nil {
				seen[rec.Index] = o
			}
			w := writer[rec.Value]
			switch {
			case w == nil:
				r.fail("%s: %s at %s saw the record %q (token %d, index %d), which no writer wrote", name, o, hs.at(o.complete), rec.Value, rec.Token, rec.Index)
				continue
			case w.hold.token != rec.Token:
				r.fail("%s: %s at %s saw the record %q with token %d, but %s wrote it under token %d", name, o, hs.at(o.complete), rec.Value, rec.Token, w.hold.id, w.hold.token)
			case w.outcome == "fail" && !refusedSeen[w]:
				refusedSeen[w] = true
				r.fail("%s: %s at %s saw the record %q (index %d), but %s was refused at %s (%s): a refused write must change nothing",
					name, o, hs.at(o.complete), rec.Value, rec.Index, w, hs.at(w.complete), w.result)
			}
			if rec.Index <= rec.Token {
				r.fail("%s: the record %q (token %d) was written at index %d, not after its grant", name, rec.Value, rec.Token, rec.Index)
			}
			if g := between(rec.Token, rec.Index); g != nil {
				r.fail("%s: the record %q was applied at index %d under token %d, yet %s had been granted the name with token %d in between: a stale holder's write was accepted (seen by %s)",
					name, rec.Value, rec.Index, rec.Token, g.id, g.token, o)
			}
		}
		// Tokens of the successful writes only grow with the index, and
		// the indexes follow real time.
		sort.SliceStable(sets, func(i, j int) bool { return sets[i].rec.Index < sets[j].rec.Index })
		for i := 1; i < len(sets); i++ {
			if a, b := sets[i-1], sets[i]; b.rec.Token < a.rec.Token {
				r.fail("%s: %s was applied at index %d with token %d, after %s at index %d with token %d: tokens of writes must only grow",
					name, b, b.rec.Index, b.rec.Token, a, a.rec.Index, a.rec.Token)
			}
		}
		byInvoke := append([]*recOp(nil), sets...)
		sort.SliceStable(byInvoke, func(i, j int) bool { return byInvoke[i].invoke < byInvoke[j].invoke })
		byDone := append([]*recOp(nil), sets...)
		sort.SliceStable(byDone, func(i, j int) bool { return byDone[i].complete < byDone[j].complete })
		k := 0
		var top *recOp
		for _, b := range byInvoke {
			for ; k < len(byDone) && byDone[k].complete < b.invoke; k++ {
				if top == nil || byDone[k].rec.Index > top.rec.Index {
					top = byDone[k]
				}
			}
			if top != nil && top.rec.Index >= b.rec.Index {
				r.fail("%s: %s was acknowledged at %s with index %d, before %s was invoked at %s, which got index %d",
					name, top, hs.at(top.complete), top.rec.Index, b, hs.at(b.invoke), b.rec.Index)
			}
		}
	}
	for _, f := range []string{"rec-set", "rec-delete", "release", "rec-read", "grant"} {
		c := stats[f]
		what := map[string]string{"rec-set": "record writes", "rec-delete": "record deletes", "release": "releases with a record",
			"rec-read": "record reads", "grant": "grants carrying the record"}[f]
		r.note("%s: %d ok, %d refused (not the holder), %d failed or unknown", what, c.ok, c.refused, c.unknown)
	}
	if noIndex > 0 {
		r.note("%d writes were acknowledged without their index (a retried release with record that found its write applied): their value and token are checked, not their index", noIndex)
	}
	return r
}

// checkGrantRecords: every grant carried the record that the log (or a
// watch) shows as the name's at the grant's index (its token).
func checkGrantRecords(hs *history, ops []*recOp, tl *recTimeline, r *checkResult) {
	checked := 0
	for _, o := range ops {
		if o.f != "grant" || o.rec == nil {
			continue
		}
		want, ok := tl.at(o.name, o.hold.token)
		if !ok {
			continue
		}
		checked++
		got := o.rec
		switch {
		case want == nil && got.None:
		case want != nil && !got.None && want.Value == got.Value && want.Token == got.Token && want.Index == got.Index:
		default:
			r.fail("%s: %s at %s carried %s, but the log shows %s at index %d: a new holder must see what its predecessor left",
				o.name, o, hs.at(o.complete), describeRec(got), describeRec(want), o.hold.token)
		}
	}
	r.note("%d grants' records compared with the log's (or a watch's) record of the name at the grant (from index %d on)", checked, tl.from+1)
}

func describeRec(rec *RecInfo) string {
	if rec == nil || rec.None {
		return "no record"
	}
	return fmt.Sprintf("the record %q (token %d, index %d)", rec.Value, rec.Token, rec.Index)
}

package fsm

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"pgregory.net/rapid"
)

// TestMoveIsInvisible is groups.md §17.1: random histories over several
// namespaces run on one Machine that never moves (the oracle) and on two
// or three Machines of groups 0, 1 and 2 between which the namespaces'
// slots move (Freeze, Export, ImportChunk, Import, Drop, or Reject and
// Unfreeze) at random points. A command refused with CodeMoving changes
// nothing and is retried on the owner once the move went on. Every
// session sees the same results and events (Seq included) and every
// namespace the same Query, up to a renaming of session ids and a
// per-namespace, order-preserving renaming of tokens. After every entry
// the invariants (a)–(g) of §17.1 are checked (see mvHarness.check).
//
// LOCKCLUSTER_MOVE_HISTORIES sets the number of histories (default 300;
// -rapid.checks does not apply to this test).
func TestMoveIsInvisible(t *testing.T) {
	n := 300
	if v := os.Getenv("LOCKCLUSTER_MOVE_HISTORIES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatalf("LOCKCLUSTER_MOVE_HISTORIES=%q", v)
		}
	}
	// Through the flags' values, not flag.Set, which would mark them set
	// and change what rapidDefaults gives the other tests; so
	// -rapid.checks does not reach this test.
	for name, v := range map[string]string{"rapid.checks": strconv.Itoa(n), "rapid.nofailfile": "true"} {
		f := flag.Lookup(name)
		old := f.Value.String()
		_ = f.Value.Set(v)
		defer func() { _ = f.Value.Set(old) }()
	}
	rapid.Check(t, func(t *rapid.T) {
		h := newMvHarness(t)
		steps := rapid.IntRange(1, 80).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			if h.mv != nil || rapid.IntRange(0, 5).Draw(t, "moveStep") == 0 {
				if h.mv == nil || rapid.IntRange(0, 2).Draw(t, "advance") == 0 {
					h.moveStep(t)
				}
			}
			h.command(t)
			if rapid.IntRange(0, 9).Draw(t, "restore") == 0 {
				h.restore(t, rapid.IntRange(0, len(h.ms)-1).Draw(t, "restored"))
			}
		}
		for h.mv != nil { // finish the last move: the state must still agree
			h.advance(t, false)
		}
		h.compareQueries(t)
	})
}

var mvNamespaces = []string{"n1", "n2", "n3"}

type mvHarness struct {
	o      *Machine // the oracle: group 0, never moves
	mdl    *model   // what the generator draws from (it follows o)
	g      *gen
	oIndex uint64
	time   int64

	ms      []*Machine
	idx     []uint64
	offsets []uint64
	dir     map[string]int    // namespace → the machine commands go to
	epoch   map[uint16]uint32 // the last epoch of each slot
	mv      *moveRun
	prev    *moveRun // the last move that finished forward
	entry   int      // entries applied to the cluster

	sid  map[uint64]uint64    // oracle session id → cluster session id
	toks map[string]*renaming // per namespace: oracle token ↔ cluster token
	last map[string][2]uint64 // per namespace: last granted token, its entry
	xs   map[stageKey][]byte  // (g): the first export of each move, flattened
}

// moveRun is the move in progress.
type moveRun struct {
	slots    []uint16
	names    []string
	src, dst int
	epoch    uint32
	x        *Export
	chunk    int // the export's object bound
	sent     int // chunks staged
	imported bool
}

func newMvHarness(t *rapid.T) *mvHarness {
	h := &mvHarness{o: New(), mdl: newModel(), g: newGen(), dir: map[string]int{}, epoch: map[uint16]uint32{},
		sid: map[uint64]uint64{}, toks: map[string]*renaming{}, last: map[string][2]uint64{}, xs: map[stageKey][]byte{}}
	for i := 0; i < rapid.IntRange(2, 3).Draw(t, "machines"); i++ {
		h.ms = append(h.ms, NewGroup(uint16(i)))
		h.idx = append(h.idx, 0)
		h.offsets = append(h.offsets, 0)
		if i > 0 {
			h.mustOK(t, i, &SetGroup{Group: uint16(i)})
		}
	}
	for _, ns := range mvNamespaces {
		h.dir[ns] = 0
	}
	return h
}

// apply applies cmd to machine i at its next index (through the codec)
// and checks the invariants.
func (h *mvHarness) apply(t *rapid.T, i int, cmd Command) Applied {
	h.idx[i]++
	h.entry++
	b, err := EncodeEntry(Entry{Time: h.time, Cmd: cmd})
	if err != nil {
		t.Fatal(err)
	}
	ap, err := h.ms[i].ApplyBytes(h.idx[i], b)
	if err != nil {
		t.Fatalf("machine %d: %v", i, err)
	}
	t.Logf("machine %d #%d %s: %v %v", i, h.idx[i], fmtCmd(cmd), ap.Result.Status, ap.Result.Err)
	h.check(t, i, ap)
	return ap
}

func (h *mvHarness) mustOK(t *rapid.T, i int, cmd Command) {
	if ap := h.apply(t, i, cmd); ap.Result.Err != nil || ap.Result.Duplicate {
		t.Fatalf("machine %d: %s: %+v", i, fmtCmd(cmd), ap.Result)
	}
}

// noop applies a move entry that must change nothing (§17.1 (d)): a
// repeat, or an Import or ImportChunk after Reject.
func (h *mvHarness) noop(t *rapid.T, i int, cmd Command, refused bool) {
	before := stateBytes(h.ms[i])
	ap := h.apply(t, i, cmd)
	if refused != (ap.Result.Err != nil) || (!refused && !ap.Result.Duplicate) || len(ap.Events) > 0 {
		t.Fatalf("machine %d: %s is not a no-op: %+v", i, fmtCmd(cmd), ap.Result)
	}
	if !bytes.Equal(before, stateBytes(h.ms[i])) {
		t.Fatalf("machine %d: %s changed the state", i, fmtCmd(cmd))
	}
}

// stateBytes is the snapshot of m with the last index left out: an entry
// that changes nothing still moves the last index.
func stateBytes(m *Machine) []byte {
	li := m.st.lastIndex
	m.st.lastIndex = 0
	b := m.Snapshot()
	m.st.lastIndex = li
	return b
}

// check is §17.1's invariants after an entry applied on machine i.
func (h *mvHarness) check(t *rapid.T, i int, ap Applied) {
	m := h.ms[i]
	if err := checkState(m.st); err != nil { // (e) the id order, and the lock rules
		t.Fatalf("machine %d: %v", i, err)
	}
	if m.st.offset < h.offsets[i] { // (f)
		t.Fatalf("machine %d: the offset went down from %d to %d", i, h.offsets[i], m.st.offset)
	}
	h.offsets[i] = m.st.offset
	for s := range Slots { // (b)
		owners := 0
		for _, x := range h.ms {
			if x.st.slots[s].kind == slotOwned {
				owners++
			}
		}
		if owners > 1 {
			t.Fatalf("slot %d is owned by %d machines", s, owners)
		}
	}
	seen := map[uint64]int{} // (e): ids unique among the sessions served
	for k, x := range h.ms {
		for id, s := range x.st.sessions {
			if x.st.owns(s.ns.name) != nil {
				continue // a frozen slot's copy, until the Drop
			}
			if j, dup := seen[id]; dup {
				t.Fatalf("session %d is served by machines %d and %d", id, j, k)
			}
			seen[id] = k
		}
	}
	for _, e := range ap.Events { // (a): per namespace, tokens grow in grant order
		if e.Kind != EventGranted {
			continue
		}
		ns := m.st.sessions[e.Session].ns.name
		l := h.last[ns]
		if e.Token < l[0] || (e.Token == l[0] && uint64(h.entry) != l[1]) {
			t.Fatalf("namespace %s: token %d granted after token %d", ns, e.Token, l[0])
		}
		h.last[ns] = [2]uint64{e.Token, uint64(h.entry)}
	}
}

// restore replaces machine i by one restored from its snapshot (moves in
// progress included), which must encode the same bytes; the history goes
// on with it.
func (h *mvHarness) restore(t *rapid.T, i int) {
	b := h.ms[i].Snapshot()
	m := NewGroup(h.ms[i].Group())
	if err := m.Restore(bytes.NewReader(b)); err != nil {
		t.Fatalf("machine %d: %v", i, err)
	}
	if !bytes.Equal(m.Snapshot(), b) {
		t.Fatalf("machine %d restores to other bytes", i)
	}
	h.ms[i] = m
}

// --- commands -------------------------------------------------------------

func (h *mvHarness) command(t *rapid.T) {
	cmd := h.g.draw(t, h.mdl)
	h.time += int64(rapid.IntRange(0, 3).Draw(t, "dt"))
	if c, ok := cmd.(*OpenSession); ok {
		c.SecretHash = mvSecretHash // so that ended sessions leave tombstones, which move
	}
	if c, ok := cmd.(*SetLimits); ok { // group-level: every group applies it
		// A move in progress ends first: SetLimits does not trim the
		// outcomes of a frozen slot's sessions, Import trims them to the
		// limit then in force, so a limit lowered and raised again during
		// a move is not seen by them (DESIGN.md, "Moves (phase 2)").
		for h.mv != nil {
			h.advance(t, rapid.IntRange(0, 4).Draw(t, "abortForLimits") == 0)
		}
		want := h.oracle(cmd)
		for i := range h.ms {
			got := h.apply(t, i, c)
			h.same(t, "", got, want, cmd)
		}
		return
	}
	ns := h.nsOf(cmd)
	cc := h.translate(cmd, ns)
	var got Applied
	for tries := 0; ; tries++ {
		i := h.dir[ns]
		// A stale route: the source refuses. Not for ExpireSession,
		// which names no namespace and which only the leader of the
		// group that serves the session proposes.
		_, expire := cc.(*ExpireSession)
		if mv := h.mv; !expire && mv != nil && mv.imported && slices.Contains(mv.names, ns) && rapid.IntRange(0, 3).Draw(t, "stale") == 0 {
			i = mv.src
		} else if p := h.prev; !expire && p != nil && p.src != h.dir[ns] && slices.Contains(p.names, ns) && rapid.IntRange(0, 3).Draw(t, "staleGone") == 0 {
			i = p.src // after the Drop: CodeMoved (or CodeMoving, if it comes back)
		}
		var before []byte
		if h.ms[i].Owns(ns) != nil {
			before = stateBytes(h.ms[i])
		}
		got = h.apply(t, i, cc)
		code := codeOf(got.Result.Err)
		if code != CodeMoving && code != CodeMoved {
			if before != nil && got.Result.Err == nil && !got.Result.Duplicate {
				t.Fatalf("machine %d served %s, whose slot it does not own: %+v", i, ns, got.Result)
			}
			break
		}
		// (c): a refusal changes nothing and emits nothing.
		if before == nil || len(got.Events) > 0 || !bytes.Equal(before, stateBytes(h.ms[i])) {
			t.Fatalf("machine %d: refused %s changed something", i, fmtCmd(cc))
		}
		if tries > 10 {
			t.Fatalf("%s refused %d times", fmtCmd(cc), tries)
		}
		for h.mv != nil && !h.mv.imported {
			h.advance(t, rapid.IntRange(0, 4).Draw(t, "abortParked") == 0)
		}
	}
	h.same(t, ns, got, h.oracle(cmd), cmd)
	h.compareQueries(t)
	h.compareCheck(t)
}

func errCode(e *Error) Code {
	if e == nil {
		return codeOK
	}
	return e.Code
}

var mvSecret = []byte("secret")
var mvSecretHash = HashSecret(mvSecret)

// compareCheck compares CheckSession of a session the oracle opened
// (live or ended: its tombstone moved with its slot) on the machine that
// owns its namespace with the oracle's answer.
func (h *mvHarness) compareCheck(t *rapid.T) {
	if len(h.g.ids) == 0 {
		return
	}
	o := rapid.SampledFrom(h.g.ids).Draw(t, "checkSession")
	ns := h.g.ns[o]
	for i, m := range h.ms {
		if m.Owns(ns) != nil {
			continue
		}
		for _, secret := range [][]byte{mvSecret, []byte("wrong")} {
			if g, w := errCode(m.CheckSession(h.csid(o), ns, secret)), errCode(h.o.CheckSession(o, ns, secret)); g != w {
				t.Fatalf("CheckSession(%d, %s) on machine %d: %v, the oracle's %v", h.csid(o), ns, i, g, w)
			}
		}
	}
}

// oracle applies cmd to the oracle and the model.
func (h *mvHarness) oracle(cmd Command) Applied {
	h.oIndex++
	ap := h.o.Apply(h.oIndex, Entry{Time: h.time, Cmd: cmd})
	h.mdl.apply(h.oIndex, h.time, cmd)
	h.g.note(cmd, ap.Result)
	return ap
}

// nsOf is the namespace a command is routed by: its own, or for
// ExpireSession its session's.
func (h *mvHarness) nsOf(cmd Command) string {
	if _, ns, ok := namespaceOf(cmd); ok {
		if _, known := h.dir[ns]; known {
			return ns
		}
		return "n1"
	}
	if c, ok := cmd.(*ExpireSession); ok {
		if ns, ok := h.g.ns[c.Session]; ok {
			return ns
		}
	}
	return "n1"
}

// csid is the cluster's id of the oracle's session o (an id no session
// has, for one never opened).
func (h *mvHarness) csid(o uint64) uint64 {
	if c, ok := h.sid[o]; ok {
		return c
	}
	return o | 1<<47
}

func (h *mvHarness) ren(ns string) *renaming {
	r := h.toks[ns]
	if r == nil {
		r = &renaming{o2c: map[uint64]uint64{}, c2o: map[uint64]uint64{}}
		h.toks[ns] = r
	}
	return r
}

// ctok is the cluster's token for the oracle's token o in ns (a token no
// grant has, for one the oracle never gave there).
func (h *mvHarness) ctok(ns string, o uint64) uint64 {
	if o == 0 {
		return 0
	}
	if c, ok := h.ren(ns).o2c[o]; ok {
		return c
	}
	return o | 1<<62
}

func (h *mvHarness) translate(cmd Command, ns string) Command {
	switch c := cmd.(type) {
	case *OpenSession:
		x := *c
		return &x
	case *CloseSession:
		x := *c
		x.Session = h.csid(c.Session)
		return &x
	case *ExpireSession:
		x := *c
		x.Session = h.csid(c.Session)
		return &x
	case *Request:
		x := *c
		x.Session = h.csid(c.Session)
		return &x
	case *Release:
		x := *c
		x.Session, x.Token = h.csid(c.Session), h.ctok(ns, c.Token)
		return &x
	case *Abort:
		x := *c
		x.Session = h.csid(c.Session)
		return &x
	case *SetRecord:
		x := *c
		x.Session, x.Token = h.csid(c.Session), h.ctok(ns, c.Token)
		return &x
	}
	panic(fmt.Sprintf("translate %T", cmd))
}

// renaming is a namespace's token renaming: a bijection that keeps the
// order.
type renaming struct {
	o2c, c2o map[uint64]uint64
}

func (h *mvHarness) pair(t *rapid.T, ns string, o, c uint64) {
	if o == 0 || c == 0 {
		if o != c {
			t.Fatalf("namespace %s: token %d against the oracle's %d", ns, c, o)
		}
		return
	}
	r := h.ren(ns)
	if x, ok := r.o2c[o]; ok {
		if x != c {
			t.Fatalf("namespace %s: the oracle's token %d is %d here and %d there", ns, o, x, c)
		}
		return
	}
	if x, ok := r.c2o[c]; ok && x != o {
		t.Fatalf("namespace %s: token %d is the oracle's %d and %d", ns, c, x, o)
	}
	for o2, c2 := range r.o2c {
		if (o2 < o) != (c2 < c) {
			t.Fatalf("namespace %s: tokens (%d, %d) and (%d, %d) are not in the same order", ns, o2, c2, o, c)
		}
	}
	r.o2c[o], r.c2o[c] = c, o
}

func (h *mvHarness) sameClient(t *rapid.T, oSid, cSid uint64, o, c string) {
	if o == itoa(oSid) {
		o = itoa(cSid)
	}
	if o != c {
		t.Fatalf("client id %q, want %q", c, o)
	}
}

func (h *mvHarness) sameRecord(t *rapid.T, ns string, c, o Record) {
	h.pair(t, ns, o.Token, c.Token)
	if c.Index < c.Token {
		t.Fatalf("record %+v: index below token", c)
	}
	c.Token, c.Index, o.Token, o.Index = 0, 0, 0, 0 // indexes are each group's own
	if !reflect.DeepEqual(c, o) {
		t.Fatalf("record %+v, want %+v", c, o)
	}
}

// same compares the cluster's answer to a command with the oracle's.
func (h *mvHarness) same(t *rapid.T, ns string, got, want Applied, cmd Command) {
	g, w := got.Result, want.Result
	if codeOf(g.Err) != codeOf(w.Err) {
		t.Fatalf("%s: %v, the oracle %v", fmtCmd(cmd), g.Err, w.Err)
	}
	h.pair(t, ns, tokenOf(w.Err), tokenOf(g.Err))
	if _, open := cmd.(*OpenSession); open && w.Err == nil {
		h.sid[w.Session] = g.Session
	}
	if w.Session != 0 && h.csid(w.Session) != g.Session {
		t.Fatalf("%s: session %d, the oracle's %d", fmtCmd(cmd), g.Session, w.Session)
	}
	if w.Err == nil {
		h.sameClient(t, w.Session, g.Session, w.ClientID, g.ClientID)
	}
	h.pair(t, ns, w.Token, g.Token)
	if (g.Record == nil) != (w.Record == nil) || len(g.Records) != len(w.Records) {
		t.Fatalf("%s: records %+v, the oracle's %+v", fmtCmd(cmd), g, w)
	}
	if g.Record != nil {
		h.sameRecord(t, ns, *g.Record, *w.Record)
	}
	for k := range g.Records {
		h.sameRecord(t, ns, g.Records[k], w.Records[k])
	}
	if g.Status != w.Status || g.AcquiredAt != w.AcquiredAt || g.Cause != w.Cause || g.Reason != w.Reason || g.Duplicate != w.Duplicate {
		t.Fatalf("%s: %+v, the oracle %+v", fmtCmd(cmd), g, w)
	}
	if len(got.Events) != len(want.Events) {
		t.Fatalf("%s: events %+v, the oracle's %+v", fmtCmd(cmd), got.Events, want.Events)
	}
	for k, ge := range got.Events {
		we := want.Events[k]
		if h.csid(we.Session) != ge.Session {
			t.Fatalf("event %+v, the oracle's %+v", ge, we)
		}
		h.pair(t, ns, we.Token, ge.Token)
		if len(ge.Records) != len(we.Records) {
			t.Fatalf("event %+v, the oracle's %+v", ge, we)
		}
		for r := range ge.Records {
			h.sameRecord(t, ns, ge.Records[r], we.Records[r])
		}
		ge.Session, ge.Token, ge.Records, we.Session, we.Token, we.Records = 0, 0, nil, 0, 0, nil
		if !reflect.DeepEqual(ge, we) { // Seq included
			t.Fatalf("event %+v, the oracle's %+v", ge, we)
		}
	}
}

// compareQueries compares each namespace's Query on its owner (if some
// machine owns its slot now) with the oracle's.
func (h *mvHarness) compareQueries(t *rapid.T) {
	for _, ns := range mvNamespaces {
		owner := -1
		for i, m := range h.ms {
			if m.Owns(ns) == nil {
				owner = i
			}
		}
		if owner < 0 {
			continue
		}
		g, w := h.ms[owner].Query(ns), h.o.Query(ns)
		if len(g.Held) != len(w.Held) || len(g.Pending) != len(w.Pending) || len(g.Records) != len(w.Records) {
			t.Fatalf("query %s on machine %d:\n%+v\nthe oracle's\n%+v", ns, owner, g, w)
		}
		cmpInfo := func(gl, wl []LockInfo) {
			for k := range gl {
				a, b := gl[k], wl[k]
				if h.csid(b.Session) != a.Session {
					t.Fatalf("query %s: %+v, the oracle's %+v", ns, a, b)
				}
				h.sameClient(t, b.Session, a.Session, b.ClientID, a.ClientID)
				h.pair(t, ns, b.Token, a.Token)
				a.Session, a.Token, a.ClientID, b.Session, b.Token, b.ClientID = 0, 0, "", 0, 0, ""
				if a != b {
					t.Fatalf("query %s: %+v, the oracle's %+v", ns, a, b)
				}
			}
		}
		cmpInfo(g.Held, w.Held)
		cmpInfo(g.Pending, w.Pending)
		for k := range g.Records {
			h.sameRecord(t, ns, g.Records[k], w.Records[k])
		}
	}
}

// --- moves ------------------------------------------------------------------

// moveStep starts a move, or takes the one in progress one step on.
func (h *mvHarness) moveStep(t *rapid.T) {
	if h.mv != nil {
		h.advance(t, rapid.IntRange(0, 5).Draw(t, "abort") == 0)
		return
	}
	src := rapid.IntRange(0, len(h.ms)-1).Draw(t, "src")
	var names []string
	for _, ns := range mvNamespaces {
		if h.dir[ns] == src && rapid.Bool().Draw(t, "take") {
			names = append(names, ns)
		}
	}
	if len(names) == 0 {
		return
	}
	dst := (src + rapid.IntRange(1, len(h.ms)-1).Draw(t, "dst")) % len(h.ms)
	var slots []uint16
	var epoch uint32
	for _, ns := range names {
		slots = append(slots, Slot(ns))
		epoch = max(epoch, h.epoch[Slot(ns)])
	}
	slices.Sort(slots)
	epoch++
	for _, s := range slots {
		h.epoch[s] = epoch
	}
	mv := &moveRun{slots: slots, names: names, src: src, dst: dst, epoch: epoch, chunk: rapid.IntRange(1, 5).Draw(t, "chunk")}
	fr := &Freeze{Slots: slots, Epoch: epoch, To: uint16(dst)}
	h.mustOK(t, src, fr)
	if rapid.IntRange(0, 3).Draw(t, "dupFreeze") == 0 {
		h.noop(t, src, fr, false)
	}
	mv.x = h.export(t, mv)
	h.mv = mv
}

// export exports the move's slots from its source, checking that a
// second export is byte-equal to the first (§17.1 (g)).
func (h *mvHarness) export(t *rapid.T, mv *moveRun) *Export {
	m := h.ms[mv.src]
	m.exportChunk = mv.chunk
	x, err := m.Export(mv.slots, mv.epoch)
	m.exportChunk = 0
	if err != nil {
		t.Fatal(err)
	}
	if x.SHA256 != chunkSum(x.Chunks) || x.FloorL != m.st.mv.out[mv.slots[0]].floorL {
		t.Fatalf("export: %+v", x)
	}
	flat := bytes.Join(x.Chunks, []byte{0xff})
	k := keyOf(mv.slots, mv.epoch)
	if first, ok := h.xs[k]; ok && !bytes.Equal(first, flat) {
		t.Fatalf("two exports of slots %v at epoch %d differ", mv.slots, mv.epoch)
	}
	h.xs[k] = flat
	return x
}

// advance takes the move one step on: the next chunk, the Import, the
// Drop; or, before the Import and with abort, the abort (Reject on the
// target, then Unfreeze on the source).
func (h *mvHarness) advance(t *rapid.T, abort bool) {
	mv := h.mv
	switch {
	case !mv.imported && abort:
		rj := &Reject{Slots: mv.slots, Epoch: mv.epoch}
		h.mustOK(t, mv.dst, rj)
		h.noop(t, mv.dst, rj, false)
		h.noop(t, mv.dst, mv.x.Import(), true) // (d): Reject then Import
		if len(mv.x.Chunks) > 0 {
			h.noop(t, mv.dst, mv.x.ImportChunks()[0], true)
		}
		h.mustOK(t, mv.src, &Unfreeze{Slots: mv.slots, Epoch: mv.epoch})
		h.mv = nil
	case !mv.imported && mv.sent < len(mv.x.Chunks):
		h.mustOK(t, mv.dst, mv.x.ImportChunks()[mv.sent])
		mv.sent++
		if rapid.IntRange(0, 3).Draw(t, "dupChunk") == 0 {
			h.noop(t, mv.dst, mv.x.ImportChunks()[rapid.IntRange(0, mv.sent-1).Draw(t, "dupSeq")], false)
		}
	case !mv.imported:
		if rapid.Bool().Draw(t, "reexport") {
			h.export(t, mv) // (g), later
		}
		im := mv.x.Import()
		h.mustOK(t, mv.dst, im)
		dst := h.ms[mv.dst]
		if l := dst.LastLogical(); l <= mv.x.FloorL || dst.Logical(dst.LastIndex()) != l {
			t.Fatalf("after Import, L = %d (Logical of the last index %d), not above the Freeze's %d", l, dst.Logical(dst.LastIndex()), mv.x.FloorL)
		}
		if rapid.IntRange(0, 3).Draw(t, "dupImport") == 0 {
			h.noop(t, mv.dst, im, false)
		}
		mv.imported = true
		for _, ns := range mv.names {
			h.dir[ns] = mv.dst
		}
	default:
		dr := &Drop{Slots: mv.slots, Epoch: mv.epoch}
		h.mustOK(t, mv.src, dr)
		if rapid.IntRange(0, 3).Draw(t, "dupDrop") == 0 {
			h.noop(t, mv.src, dr, false)
		}
		h.mv, h.prev = nil, mv
	}
}

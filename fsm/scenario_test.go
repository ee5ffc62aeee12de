package fsm

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestScenarios runs the scripts in testdata/. Each directive is one
// command (or, for "apply", one command per input line):
//
//	open S [ns=NS] [label=L] [ttl=DUR] [client=ID]   OpenSession as S
//	request S ID NAMES [shared] [ifAvailable] [steal] [signal] [ack=N] [max=N] [ns=NS]
//	                               NAMES: a or a,b,c; "" is the empty name;
//	                               max: MaxHolders (a semaphore)
//	record S ID NAME VALUE token=N [delete] [release] [ack=N] [ns=NS]
//	                               SetRecord; VALUE "" is empty, size=N
//	                               (without VALUE) is N bytes of x
//	getrecord NAME [ns=NS]         Machine.Record
//	changes on|off|watched         KeepChanges: print each entry's changes;
//	                               watched: KeepChangesWhenWatched
//	start-changes                  StartChanges
//	changesfrom                    Machine.ChangesFrom
//	release S ID [token=N] [ack=N] [ns=NS]
//	abort S ID [reason=WORDS...] [ns=NS]
//	close S [ns=NS] / expire S
//	limits KEY=N...                SetLimits over the current limits
//	index N / time T               the next entry's index / leader time
//	query [NS]                     Query (default namespace "default")
//	sessions                       the live sessions
//	snapshot                       snapshot, restore into a new machine,
//	                               and check that both have the same digest
//
// Every entry prints its index, result and events. Session ids print as the
// script's names (S), so the output reads like the script.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario scripts in testdata: %v", err)
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) { runScenario(t, path) })
	}
}

// runScenario runs one script; only testdata/*.txt are scripts, so fuzz
// corpora and other files may live under testdata too.
func runScenario(t *testing.T, path string) {
	h := newHarness()
	datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd == "apply" {
			var out strings.Builder
			for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
				if line = strings.TrimSpace(line); line != "" {
					out.WriteString(h.run(t, strings.Fields(line)))
				}
			}
			return out.String()
		}
		return h.run(t, append([]string{d.Cmd}, strings.Fields(argsLine(d))...))
	})
}

func argsLine(d *datadriven.TestData) string {
	// d.Pos has the file position; the raw directive is the command line.
	var parts []string
	for _, a := range d.CmdArgs {
		parts = append(parts, a.String())
	}
	return strings.Join(parts, " ")
}

type harness struct {
	m       *Machine
	index   uint64
	time    int64
	ids     map[string]uint64 // script session name → session id
	names   map[uint64]string
	sawTime bool
	changes bool // print changes (KeepChanges is on)
	// keepAll, watched: the machine's KeepChanges and
	// KeepChangesWhenWatched, which a restored machine gets too.
	keepAll, watched bool
	// Several machines (move_scenario_test.go): the current one is m,
	// at index; the others wait in ms and idx by name.
	cur    string
	ms     map[string]*Machine
	idx    map[string]uint64
	export *Export // the last export
}

func newHarness() *harness {
	return &harness{m: New(), index: 1, time: 1000, ids: map[string]uint64{}, names: map[uint64]string{}}
}

func (h *harness) sess(n string) uint64 {
	if id, ok := h.ids[n]; ok {
		return id
	}
	// An unknown script name stands for a session id that was never opened.
	id, err := strconv.ParseUint(strings.TrimPrefix(n, "#"), 10, 64)
	if err != nil {
		id = 999999
	}
	return id
}

func (h *harness) name(id uint64) string {
	if n, ok := h.names[id]; ok {
		return n
	}
	return "#" + strconv.FormatUint(id, 10)
}

func (h *harness) run(t *testing.T, f []string) string {
	t.Helper()
	cmd, args := f[0], f[1:]
	opts, pos := map[string]string{}, []string(nil)
	flags := map[string]bool{}
	for i, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok {
			if k == "reason" { // the rest of the line
				v = strings.Join(append([]string{v}, args[i+1:]...), " ")
				opts[k] = v
				break
			}
			opts[k] = v
		} else if len(pos) < positional(cmd) {
			pos = append(pos, a)
		} else {
			flags[a] = true
		}
	}
	ns := "default"
	if v, ok := opts["ns"]; ok {
		ns = v
	}
	u := func(s string) uint64 {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("bad number %q in %v", s, f)
		}
		return v
	}
	switch cmd {
	case "index":
		h.index = u(pos[0])
		return ""
	case "time":
		h.time = int64(u(pos[0]))
		return ""
	case "query":
		if len(pos) > 0 {
			ns = pos[0]
		}
		return h.query(ns)
	case "sessions":
		var b strings.Builder
		for _, s := range h.m.Sessions() {
			fmt.Fprintf(&b, "%s ns=%s client=%s label=%q ttl=%s held=%d pending=%d events=%d\n", h.name(s.ID), s.Namespace, s.ClientID, s.Label, dur(s.TTL), s.held, s.pending, s.eventSeq)
		}
		if b.Len() == 0 {
			return "(none)\n"
		}
		return b.String()
	case "snapshot":
		return h.snapshot(t)
	case "changes":
		h.keepAll, h.watched = pos[0] == "on", h.watched || pos[0] == "watched"
		h.keep(h.m)
		h.changes = h.keepAll || h.watched
		return ""
	case "changesfrom":
		return fmt.Sprintf("changes from index %d\n", h.m.ChangesFrom())
	case "getrecord":
		rec, idx, ok := h.m.Record(ns, splitNames(pos[0])[0])
		if !ok {
			return fmt.Sprintf("none at index %d\n", idx)
		}
		return fmt.Sprintf("%s at index %d\n", fmtRecord(rec), idx)
	}
	var c Command
	switch cmd {
	case "open":
		ttl := int64(10e9)
		if v, ok := opts["ttl"]; ok {
			d, err := parseDur(v)
			if err != nil {
				t.Fatal(err)
			}
			ttl = d
		}
		c = &OpenSession{Namespace: ns, Label: opts["label"], TTL: ttl, ClientID: opts["client"]}
	case "close":
		c = &CloseSession{Session: h.sess(pos[0]), Namespace: ns}
	case "start-changes":
		c = &StartChanges{}
	case "expire":
		c = &ExpireSession{Session: h.sess(pos[0])}
	case "request":
		r := &Request{Session: h.sess(pos[0]), Namespace: ns, RequestID: u(pos[1]), Names: splitNames(pos[2]),
			IfAvailable: flags["ifAvailable"], Steal: flags["steal"], Signal: flags["signal"]}
		if flags["shared"] {
			r.Mode = Shared
		}
		if v, ok := opts["mode"]; ok {
			r.Mode = Mode(u(v))
		}
		if v, ok := opts["ack"]; ok {
			r.AckBelow = u(v)
		}
		if v, ok := opts["max"]; ok {
			r.MaxHolders = uint32(u(v))
		}
		c = r
	case "record":
		r := &SetRecord{Session: h.sess(pos[0]), Namespace: ns, RequestID: u(pos[1]), Name: splitNames(pos[2])[0],
			Delete: flags["delete"], Release: flags["release"]}
		if len(pos) > 3 && pos[3] != `""` {
			r.Value = []byte(pos[3])
		}
		if v, ok := opts["size"]; ok {
			r.Value = bytes.Repeat([]byte("x"), int(u(v)))
		}
		if v, ok := opts["token"]; ok {
			r.Token = u(v)
		}
		if v, ok := opts["ack"]; ok {
			r.AckBelow = u(v)
		}
		c = r
	case "release":
		r := &Release{Session: h.sess(pos[0]), Namespace: ns, RequestID: u(pos[1])}
		if v, ok := opts["token"]; ok {
			r.Token = u(v)
		}
		if v, ok := opts["ack"]; ok {
			r.AckBelow = u(v)
		}
		c = r
	case "abort":
		a := &Abort{Session: h.sess(pos[0]), Namespace: ns, RequestID: u(pos[1]), Reason: opts["reason"]}
		if v, ok := opts["ack"]; ok {
			a.AckBelow = u(v)
		}
		c = a
	case "limits":
		l := h.m.Limits()
		for k, v := range opts {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("bad limit %s=%s", k, v)
			}
			switch k {
			case "MaxNameBytes":
				l.MaxNameBytes = n
			case "MaxScopeNames":
				l.MaxScopeNames = n
			case "MaxPendingPerSession":
				l.MaxPendingPerSession = n
			case "MaxHeldPerSession":
				l.MaxHeldPerSession = n
			case "MaxSessionsPerNamespace":
				l.MaxSessionsPerNamespace = n
			case "MaxFinished":
				l.maxFinished = n
			case "MaxReasonBytes":
				l.maxReasonBytes = n
			case "MaxRecordBytes":
				l.MaxRecordBytes = n
			case "MaxNamespaceRecordBytes":
				l.MaxNamespaceRecordBytes = n
			default:
				t.Fatalf("unknown limit %s", k)
			}
		}
		c = &SetLimits{Limits: l}
	default:
		if out, c2, ok := h.moveCmd(t, cmd, pos, opts, flags); ok { // move_scenario_test.go
			if c2 == nil {
				return out
			}
			c = c2
			break
		}
		t.Fatalf("unknown command %q", cmd)
	}
	return h.apply(t, strings.Join(f, " "), c, cmd == "open", pos)
}

func positional(cmd string) int {
	switch cmd {
	case "request":
		return 3
	case "record":
		return 4
	case "release", "abort":
		return 2
	case "open", "close", "expire", "index", "time", "query", "changes", "getrecord":
		return 1
	}
	return movePositional(cmd)
}

func splitNames(s string) []string {
	if s == `""` {
		return []string{""}
	}
	names := strings.Split(s, ",")
	for i, n := range names {
		if n == `""` {
			names[i] = ""
		}
	}
	return names
}

func parseDur(s string) (int64, error) {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"ms", 1e6}, {"ns", 1}, {"s", 1e9}, {"h", 3600e9}} {
		if strings.HasSuffix(s, u.suffix) {
			n, err := strconv.ParseInt(strings.TrimSuffix(s, u.suffix), 10, 64)
			return n * u.mult, err
		}
	}
	return 0, fmt.Errorf("bad duration %q", s)
}

// apply encodes the command, decodes it back (so every scenario also checks
// the codec) and applies it.
func (h *harness) apply(t *testing.T, line string, c Command, open bool, pos []string) string {
	t.Helper()
	b, err := EncodeEntry(Entry{Time: h.time, Cmd: c})
	if err != nil {
		t.Fatal(err)
	}
	idx := h.index
	h.index++
	ap, err := h.m.ApplyBytes(idx, b)
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	if open && ap.Result.Err == nil {
		h.ids[pos[0]], h.names[ap.Result.Session] = ap.Result.Session, pos[0]
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "#%d %s: %s\n", idx, c.Type(), h.result(ap.Result))
	for _, e := range ap.Events {
		fmt.Fprintf(&out, "  %s\n", h.event(e))
	}
	for _, c := range ap.Changes {
		fmt.Fprintf(&out, "  %s\n", h.change(c))
	}
	if !h.changes && ap.Changes != nil {
		t.Fatalf("%s: changes while KeepChanges is off: %+v", line, ap.Changes)
	}
	return out.String()
}

func (h *harness) change(c Change) string {
	s := fmt.Sprintf("~ %s", c.Kind)
	if c.Namespace != "default" {
		s += " ns=" + c.Namespace
	}
	s += " " + h.name(c.Session)
	if c.Label != "" {
		s += fmt.Sprintf(" label=%q", c.Label)
	}
	if c.RequestID != 0 {
		s += fmt.Sprintf(" req=%d", c.RequestID)
	}
	if len(c.Names) > 0 {
		s += fmt.Sprintf(" %s %s", fmtNames(c.Names), c.Mode)
	}
	if c.MaxHolders != 0 {
		s += fmt.Sprintf(" max=%d", c.MaxHolders)
	}
	if c.Token != 0 {
		s += fmt.Sprintf(" token=%d", c.Token)
	}
	if c.Cause != causeNone {
		s += " cause=" + c.Cause.String()
	}
	if c.Reason != "" {
		s += fmt.Sprintf(" reason=%q", c.Reason)
	}
	if c.Record != nil {
		s += " " + fmtRecord(*c.Record)
	}
	return s
}

func fmtRecord(r Record) string {
	v := string(r.Value)
	if len(v) > 16 {
		v = fmt.Sprintf("%s…(%d bytes)", v[:8], len(v))
	}
	return fmt.Sprintf("rec %q=%q token=%d at=%d index=%d", r.Name, v, r.Token, r.Time, r.Index)
}

func fmtRecords(recs []Record) string {
	var q []string
	for _, r := range recs {
		q = append(q, fmtRecord(r))
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func (h *harness) result(r Result) string {
	if r.Err != nil {
		return fmt.Sprintf("error %s: %v", codeOf(r.Err), r.Err)
	}
	s := r.Status.String()
	if r.Status == StatusOpened {
		s += fmt.Sprintf(" session=%d client=%s", r.Session, r.ClientID)
	}
	if r.Token != 0 {
		s += fmt.Sprintf(" token=%d", r.Token)
	}
	if r.Cause != causeNone {
		s += " cause=" + r.Cause.String()
	}
	if r.Reason != "" {
		s += fmt.Sprintf(" reason=%q", r.Reason)
	}
	if r.Record != nil {
		s += " " + fmtRecord(*r.Record)
	}
	if r.Records != nil {
		s += " records=" + fmtRecords(r.Records)
	}
	if r.Duplicate {
		s += " (duplicate)"
	}
	return s
}

func (h *harness) event(e Event) string {
	s := fmt.Sprintf("-> %s#%d %s", h.name(e.Session), e.Seq, e.Kind)
	if e.RequestID != 0 {
		s += fmt.Sprintf(" req=%d", e.RequestID)
	}
	if len(e.Names) > 0 {
		s += fmt.Sprintf(" %s %s", fmtNames(e.Names), e.Mode)
	}
	if e.Token != 0 {
		s += fmt.Sprintf(" token=%d", e.Token)
	}
	if e.AcquiredAt != 0 {
		s += fmt.Sprintf(" at=%d", e.AcquiredAt)
	}
	if e.Cause != causeNone {
		s += " cause=" + e.Cause.String()
	}
	if e.Reason != "" {
		s += fmt.Sprintf(" reason=%q", e.Reason)
	}
	if e.Records != nil {
		s += " records=" + fmtRecords(e.Records)
	}
	if e.Reply {
		s += " (reply)"
	}
	return s
}

func fmtNames(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return "[" + strings.Join(q, " ") + "]"
}

func (h *harness) query(ns string) string {
	q := h.m.Query(ns)
	var b strings.Builder
	max := func(l LockInfo) string {
		if l.MaxHolders == 0 {
			return ""
		}
		return fmt.Sprintf(" max=%d", l.MaxHolders)
	}
	b.WriteString("held:\n")
	for _, l := range q.Held {
		fmt.Fprintf(&b, "  %q %s %s req=%d token=%d at=%d%s\n", l.Name, l.Mode, h.name(l.Session), l.RequestID, l.Token, l.AcquiredAt, max(l))
	}
	b.WriteString("pending:\n")
	for _, l := range q.Pending {
		fmt.Fprintf(&b, "  %q %s %s req=%d%s\n", l.Name, l.Mode, h.name(l.Session), l.RequestID, max(l))
	}
	if len(q.Records) > 0 {
		b.WriteString("records:\n")
		for _, r := range q.Records {
			fmt.Fprintf(&b, "  %s\n", fmtRecord(r))
		}
	}
	return b.String()
}

// keep gives m the harness's change collection.
func (h *harness) keep(m *Machine) {
	m.KeepChanges(h.keepAll)
	if h.watched {
		m.KeepChangesWhenWatched()
	}
}

func (h *harness) snapshot(t *testing.T) string {
	m2 := NewGroup(h.m.Group())
	if err := m2.Restore(bytes.NewReader(h.m.Snapshot())); err != nil {
		return fmt.Sprintf("restore failed: %v\n", err)
	}
	if h.m.Digest() != m2.Digest() {
		return "digest differs after restore\n"
	}
	h.keep(m2)
	h.m = m2 // the rest of the script runs on the restored machine
	return fmt.Sprintf("restored at index %d, same digest\n", m2.LastIndex())
}

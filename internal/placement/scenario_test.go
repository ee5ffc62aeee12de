package placement

import (
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestScenarios runs the scripts in testdata/*.txt. Each directive is one
// command, or, for "apply", one command per input line:
//
//	index N                                   the next entry's raft index
//	create G voters=A,B [nonvoters=C]         DirCreateGroup ("-": no ids)
//	members G voters=A,B [nonvoters=C]        DirSetGroupMembers
//	state G STATE                             DirSetGroupState
//	begin SLOTS from=F to=T epoch=E           DirMoveBegin
//	phase SLOTS PHASE epoch=E [freezel=N]     DirMovePhase
//	abort SLOTS epoch=E                       DirMoveAbort
//	raw HEX                                   Apply of these bytes
//	lookup NS...                              Lookup
//	slot S...                                 LookupSlot
//	groups / moves / routes                   Groups, Moves, the table as runs
//	snapshot                                  the section's size and hex
//	decode HEX                                Decode of a section
//	decodebody HEX                            Decode of HEX with its CRC appended
//	corrupt OFFSET=BYTE|cut...                Decode of the live section edited
//	                                          (a negative OFFSET counts from the
//	                                          end of the body), its CRC fixed
//
// SLOTS is a list of slots and ranges: 1,2,7-9. Every entry prints its
// index, type and result. After every command the harness checks that
// the snapshot section round-trips: Decode of Encode reads the same as
// the live machine, and encodes to the same bytes.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario scripts in testdata: %v", err)
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			h := &harness{m: New(), index: 1}
			datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
				var lines [][]string
				if d.Cmd == "apply" {
					for _, l := range strings.Split(strings.TrimSpace(d.Input), "\n") {
						if f := strings.Fields(l); len(f) > 0 {
							lines = append(lines, f)
						}
					}
				} else {
					args := []string{d.Cmd}
					for _, a := range d.CmdArgs {
						args = append(args, a.String())
					}
					lines = append(lines, args)
				}
				var out strings.Builder
				for _, f := range lines {
					out.WriteString(h.run(t, f))
					checkRoundTrip(t, h.m)
				}
				return out.String()
			})
		})
	}
}

type harness struct {
	m     *Machine
	index uint64
}

func (h *harness) run(t *testing.T, f []string) string {
	t.Helper()
	cmd := f[0]
	opts, pos := map[string]string{}, []string(nil)
	for _, a := range f[1:] {
		if k, v, ok := strings.Cut(a, "="); ok {
			opts[k] = v
		} else {
			pos = append(pos, a)
		}
	}
	num := func(k string) uint64 {
		v, ok := opts[k]
		if !ok {
			t.Fatalf("%s: missing %s=", cmd, k)
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s: bad %s=%s", cmd, k, v)
		}
		return n
	}
	arg := func(i int) string {
		if i >= len(pos) {
			t.Fatalf("%s: missing argument %d", cmd, i+1)
		}
		return pos[i]
	}
	ids := func(k string) []string {
		v := opts[k]
		if v == "" || v == "-" {
			return nil
		}
		return strings.Split(v, ",")
	}
	var c Command
	switch cmd {
	case "index":
		h.index = mustUint(t, arg(0))
		return ""
	case "create":
		c = &DirCreateGroup{Group: uint16(mustUint(t, arg(0))), Voters: ids("voters"), Nonvoters: ids("nonvoters")}
	case "members":
		c = &DirSetGroupMembers{Group: uint16(mustUint(t, arg(0))), Voters: ids("voters"), Nonvoters: ids("nonvoters")}
	case "state":
		s, ok := ParseGroupState(arg(1))
		if !ok {
			s = GroupState(mustUint(t, arg(1)))
		}
		c = &DirSetGroupState{Group: uint16(mustUint(t, arg(0))), State: s}
	case "begin":
		c = &DirMoveBegin{Slots: parseSlots(t, arg(0)), From: uint16(num("from")), To: uint16(num("to")), Epoch: uint32(num("epoch"))}
	case "phase":
		p, ok := ParsePhase(arg(1))
		if !ok {
			p = Phase(mustUint(t, arg(1)))
		}
		var fl uint64
		if _, ok := opts["freezel"]; ok {
			fl = num("freezel")
		}
		c = &DirMovePhase{Slots: parseSlots(t, arg(0)), Epoch: uint32(num("epoch")), Phase: p, FreezeL: fl}
	case "abort":
		c = &DirMoveAbort{Slots: parseSlots(t, arg(0)), Epoch: uint32(num("epoch"))}
	case "raw":
		b, err := hex.DecodeString(strings.Trim(arg(0), `"`))
		if err != nil {
			t.Fatalf("raw: %v", err)
		}
		return h.apply(b)
	case "lookup":
		var out strings.Builder
		for _, ns := range pos {
			g, e := h.m.Lookup(ns)
			fmt.Fprintf(&out, "%s: group %d epoch %d\n", ns, g, e)
		}
		return out.String()
	case "slot":
		var out strings.Builder
		for _, s := range pos {
			g, e, ok := h.m.LookupSlot(uint16(mustUint(t, s)))
			fmt.Fprintf(&out, "slot %s: group %d epoch %d ok=%v\n", s, g, e, ok)
		}
		return out.String()
	case "groups":
		return dumpGroups(h.m)
	case "moves":
		return dumpMoves(h.m)
	case "routes":
		return dumpRoutes(h.m)
	case "snapshot":
		b := h.m.Encode()
		if b == nil {
			return "section: empty (default state)\n"
		}
		return fmt.Sprintf("section: %d bytes\n%s\n", len(b), hex.EncodeToString(b))
	case "decode":
		b, err := hex.DecodeString(strings.Trim(arg(0), `"`))
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		return decodeResult(b)
	case "decodebody":
		// decodebody HEX: Decode of these bytes with their CRC appended.
		b, err := hex.DecodeString(arg(0))
		if err != nil {
			t.Fatalf("decodebody: %v", err)
		}
		return decodeResult(withCRC(b))
	case "corrupt":
		// corrupt OFFSET=BYTE...: the live section with bytes replaced
		// (OFFSET from the start; a negative one counts from the end of
		// the body, before the CRC), the CRC fixed, then decoded.
		b := h.m.Encode()
		if b == nil {
			t.Fatal("corrupt: the state is the default: no section")
		}
		body := b[:len(b)-4]
		for _, a := range f[1:] {
			k, v, _ := strings.Cut(a, "=")
			off, err := strconv.Atoi(k)
			if err != nil {
				t.Fatalf("corrupt: bad offset %s", k)
			}
			if off < 0 {
				off += len(body)
			}
			switch v {
			case "cut":
				body = body[:off]
			default:
				by, err := strconv.ParseUint(v, 0, 8)
				if err != nil {
					t.Fatalf("corrupt: bad byte %s", v)
				}
				body[off] = byte(by)
			}
		}
		return decodeResult(withCRC(body))
	default:
		t.Fatalf("unknown command %q", cmd)
	}
	b, err := EncodeEntry(c)
	if err != nil {
		t.Fatal(err)
	}
	// The bytes decode to the same command, and encode again to the same
	// bytes.
	if c2, err := DecodeEntry(b); err != nil {
		t.Fatalf("%s: %v", cmd, err)
	} else if b2, _ := EncodeEntry(c2); string(b2) != string(b) {
		t.Fatalf("%s: entry re-encodes to %x, not %x", cmd, b2, b)
	}
	return h.apply(b)
}

func (h *harness) apply(b []byte) string {
	i := h.index
	h.index++
	name := "?"
	if len(b) > 0 {
		name = EntryType(b[0]).String()
	}
	r, err := h.m.Apply(i, b)
	switch {
	case err != nil:
		return fmt.Sprintf("#%d %s: error: %v\n", i, name, err)
	case r.Err != nil:
		return fmt.Sprintf("#%d %s: refused %s: %v\n", i, name, r.Err.(*Error).Code, r.Err)
	case r.Duplicate:
		return fmt.Sprintf("#%d %s: ok (duplicate)\n", i, name)
	}
	return fmt.Sprintf("#%d %s: ok\n", i, name)
}

func decodeResult(b []byte) string {
	m, err := Decode(b)
	if err != nil {
		return fmt.Sprintf("error: %v\n", err)
	}
	return "ok\n" + dumpRoutes(m)
}

func mustUint(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("bad number %q", s)
	}
	return n
}

// parseSlots reads 1,2,7-9 (in the order written: a malformed set stays
// malformed, for the refusals).
func parseSlots(t *testing.T, s string) []uint16 {
	t.Helper()
	if s == "-" {
		return nil
	}
	var out []uint16
	for _, p := range strings.Split(s, ",") {
		lo, hi, ok := strings.Cut(p, "-")
		a := mustUint(t, lo)
		b := a
		if ok {
			b = mustUint(t, hi)
		}
		for v := a; v <= b; v++ {
			out = append(out, uint16(v))
		}
	}
	return out
}

func dumpGroups(m *Machine) string {
	var out strings.Builder
	for _, g := range m.Groups() {
		fmt.Fprintf(&out, "group %d %s slots=%d voters=%s nonvoters=%s\n", g.ID, g.State, g.Slots, strings.Join(g.Voters, ","), strings.Join(g.Nonvoters, ","))
	}
	fmt.Fprintf(&out, "next group %d\n", m.NextGroup())
	return out.String()
}

func dumpMoves(m *Machine) string {
	var out strings.Builder
	for _, mv := range m.Moves() {
		fmt.Fprintf(&out, "slots %s: %d -> %d epoch %d %s freezeL %d active=%v\n", fmtSlots(mv.Slots), mv.From, mv.To, mv.Epoch, mv.Phase, mv.FreezeL, mv.Active())
	}
	if out.Len() == 0 {
		return "no moves\n"
	}
	return out.String()
}

// dumpRoutes prints the slot table as runs (LookupSlot agrees with the
// table: TestLookup).
func dumpRoutes(m *Machine) string {
	tbl := table(m)
	var out strings.Builder
	start := 0
	for s := 1; s <= 4096; s++ {
		if s == 4096 || tbl[s] != tbl[start] {
			fmt.Fprintf(&out, "slots %d-%d: group %d epoch %d\n", start, s-1, tbl[start].group, tbl[start].epoch)
			start = s
		}
	}
	return out.String()
}

// table is a copy of m's slot table.
func table(m *Machine) [4096]route {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.slots
}

// dump is everything the reads say, for comparing two machines.
func dump(m *Machine) string {
	return dumpGroups(m) + dumpMoves(m) + dumpRoutes(m) + fmt.Sprintf("empty %v\n", m.Empty())
}

// checkRoundTrip checks that m's section decodes to a machine that reads
// as m does and encodes to the same bytes, and that only the default
// state encodes to nothing.
func checkRoundTrip(t fataler, m *Machine) {
	t.Helper()
	b := m.Encode()
	if (b == nil) != m.Empty() {
		t.Fatalf("Encode gave %d bytes for a machine with Empty() %v", len(b), m.Empty())
	}
	m2, err := Decode(b)
	if err != nil {
		t.Fatalf("the live state's section does not decode: %v\n%s", err, dump(m))
	}
	if got, want := dump(m2), dump(m); got != want {
		t.Fatalf("the decoded state differs from the live one:\n%s\nwant:\n%s", got, want)
	}
	if b2 := m2.Encode(); string(b2) != string(b) {
		t.Fatalf("re-encoding gives other bytes:\n%x\nwant\n%x", b2, b)
	}
}

// fataler is what checkRoundTrip needs of a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// withCRC appends a section's CRC to body.
func withCRC(body []byte) []byte {
	out := append([]byte(nil), body...)
	return appendCRC(out)
}

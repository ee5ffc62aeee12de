package fsm

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The scenario commands of moves (testdata/move-*.txt), on several
// machines:
//
//	on NAME [group=G]                  make machine NAME (NewGroup(G)) current
//	setgroup G                         SetGroup
//	freeze NSS epoch=E to=G            Freeze of the slots of namespaces NSS (a,b)
//	export NSS epoch=E [objects=N]     Export from the current machine
//	importchunk NSS epoch=E seq=K      ImportChunk of the last export's chunk K
//	import NSS epoch=E [n=N] [floor=F] [badsum]   Import of the last export
//	reject|unfreeze|drop NSS epoch=E
//	slots NSS                          what Owns says of each namespace
//	owns S                             OwnsSession(S)
//	check S [ns=NS]                    CheckSession(S, NS, no secret)
//	logical                            LastIndex and LastLogical
func movePositional(cmd string) int {
	switch cmd {
	case "on", "setgroup", "freeze", "export", "importchunk", "import", "reject", "unfreeze", "drop", "slots", "owns", "check":
		return 1
	}
	return 0
}

// slotsOfNames are the slots of namespaces "a,b", ascending, once each.
func slotsOfNames(list string) []uint16 {
	var out []uint16
	for _, ns := range strings.Split(list, ",") {
		out = append(out, Slot(ns))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (h *harness) moveCmd(t *testing.T, cmd string, pos []string, opts map[string]string, flags map[string]bool) (string, Command, bool) {
	t.Helper()
	num := func(k string, def uint64) uint64 {
		v, ok := opts[k]
		if !ok {
			return def
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("bad %s=%s", k, v)
		}
		return n
	}
	var slots []uint16
	if len(pos) > 0 && cmd != "on" && cmd != "setgroup" && cmd != "owns" && cmd != "check" {
		slots = slotsOfNames(pos[0])
	}
	epoch := uint32(num("epoch", 0))
	switch cmd {
	case "on":
		if h.ms == nil {
			h.ms, h.idx, h.cur = map[string]*Machine{}, map[string]uint64{}, "A"
		}
		h.ms[h.cur], h.idx[h.cur] = h.m, h.index
		m := h.ms[pos[0]]
		if m == nil {
			m = NewGroup(uint16(num("group", 0)))
			h.ms[pos[0]], h.idx[pos[0]] = m, 1
		}
		h.cur, h.m, h.index = pos[0], m, h.idx[pos[0]]
		h.m.KeepChanges(h.changes)
		return fmt.Sprintf("on %s (group %d)\n", pos[0], m.Group()), nil, true
	case "setgroup":
		g, _ := strconv.ParseUint(pos[0], 10, 16)
		return "", &SetGroup{Group: uint16(g)}, true
	case "freeze":
		return "", &Freeze{Slots: slots, Epoch: epoch, To: uint16(num("to", 0))}, true
	case "export":
		if v, ok := opts["objects"]; ok {
			n, _ := strconv.Atoi(v)
			h.m.exportChunk = n
		}
		x, err := h.m.Export(slots, epoch)
		h.m.exportChunk = 0
		if err != nil {
			return fmt.Sprintf("export failed: %v\n", err), nil, true
		}
		h.export = x
		return fmt.Sprintf("export of slots %v at epoch %d to group %d: %d chunks, floor %d, sha %s\n", x.Slots, x.Epoch, x.To, len(x.Chunks), x.FloorL, hex.EncodeToString(x.SHA256[:4])), nil, true
	case "importchunk":
		k := num("seq", 0)
		var data []byte
		if h.export != nil && k < uint64(len(h.export.Chunks)) {
			data = h.export.Chunks[k]
		}
		return "", &ImportChunk{Slots: slots, Epoch: epoch, Seq: uint32(k), Data: data}, true
	case "import":
		c := &Import{Slots: slots, Epoch: epoch}
		if h.export != nil {
			c.N, c.FloorL, c.SHA256 = uint32(len(h.export.Chunks)), h.export.FloorL, h.export.SHA256
		}
		c.N = uint32(num("n", uint64(c.N)))
		c.FloorL = num("floor", c.FloorL)
		if flags["badsum"] {
			c.SHA256[0] ^= 1
		}
		return "", c, true
	case "reject":
		return "", &Reject{Slots: slots, Epoch: epoch}, true
	case "unfreeze":
		return "", &Unfreeze{Slots: slots, Epoch: epoch}, true
	case "drop":
		return "", &Drop{Slots: slots, Epoch: epoch}, true
	case "slots":
		var b strings.Builder
		for _, ns := range strings.Split(pos[0], ",") {
			fmt.Fprintf(&b, "%s (slot %d): %s\n", ns, Slot(ns), h.refusal(h.m.Owns(ns)))
		}
		return b.String(), nil, true
	case "owns":
		return fmt.Sprintf("%s: %s\n", pos[0], h.refusal(h.m.OwnsSession(h.sess(pos[0])))), nil, true
	case "check":
		ns := "default"
		if v, ok := opts["ns"]; ok {
			ns = v
		}
		return fmt.Sprintf("check %s: %s\n", pos[0], h.refusal(h.m.CheckSession(h.sess(pos[0]), ns, nil))), nil, true
	case "logical":
		return fmt.Sprintf("last index %d, logical %d\n", h.m.LastIndex(), h.m.LastLogical()), nil, true
	}
	return "", nil, false
}

func (h *harness) refusal(err *Error) string {
	if err == nil {
		return "ok"
	}
	s := fmt.Sprintf("%s: %s", err.Code, err.Msg)
	if si, ok := err.Slot(); ok {
		s += fmt.Sprintf(" %+v", si)
	}
	return s
}

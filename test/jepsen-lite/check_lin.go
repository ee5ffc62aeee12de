package main

import (
	"fmt"
	"hash/fnv"
	"path/filepath"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Checker (2): linearizability of the lock operations, with porcupine,
// one partition per lock name. It covers the names of the mutex,
// ifavailable and steal workloads: one name per request, exclusive mode.
// There a queue is never non-empty while the lock is free, so the state is
// just the holder, and a request that is not available is one made while
// someone holds the lock. (Shared modes and scopes make the answer depend
// on the queue; the other checkers cover them.)
//
// The model's state is the holder's id ("" when free). Operations:
//   - acquire, granted: free (or a steal) -> the request's hold id;
//   - acquire, not available: someone holds it;
//   - acquire with an unknown outcome (aborted by a deadline, session
//     lost, error): may have done nothing, or granted the lock to a hold
//     "W<process>", released by an invisible release; both end when the
//     cluster had certainly finished with the request (hold.settledBy: an
//     abort delivered, a session the cluster ended, a session whose end a
//     watch received), else they are pending until the end of the history;
//   - release: frees it if the hold has it (a stolen lock's release does
//     nothing); a hold whose lock was stolen or whose session was lost is
//     released by an invisible operation from the grant until the holder
//     was told (hold.releasedBy), or, when the client gave its session up
//     by itself (jeopardy), until a watch received the session's end, else
//     to the end of the history;
//   - query: the holders it saw, by (session, token) mapped to hold ids.

type linIn struct {
	Kind  string // acquire, maybe, release, query
	ID    string
	Steal bool
}

type linOut struct {
	Granted, NotAvailable bool
	Holders               []string
}

var lockModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{""} },
	Step: func(state, input, output any) []any {
		st, in, out := state.(string), input.(linIn), output.(linOut)
		switch in.Kind {
		case "acquire":
			if out.NotAvailable {
				if st != "" {
					return []any{st}
				}
				return nil
			}
			if st == "" || in.Steal {
				return []any{in.ID}
			}
			return nil
		case "maybe":
			if st == "" || in.Steal {
				return []any{st, in.ID}
			}
			return []any{st}
		case "release":
			if st == in.ID {
				return []any{""}
			}
			return []any{st}
		case "query":
			if (len(out.Holders) == 0 && st == "") || (len(out.Holders) == 1 && out.Holders[0] == st) {
				return []any{st}
			}
			return nil
		}
		return nil
	},
	Equal: stringStateEqual,
	Hash:  stringStateHash,
	DescribeOperation: func(input, output any) string {
		in, out := input.(linIn), output.(linOut)
		switch in.Kind {
		case "query":
			return fmt.Sprintf("query -> %v", out.Holders)
		case "acquire":
			r := "granted"
			if out.NotAvailable {
				r = "not available"
			}
			if in.Steal {
				return fmt.Sprintf("steal %s -> %s", in.ID, r)
			}
			return fmt.Sprintf("acquire %s -> %s", in.ID, r)
		}
		return fmt.Sprintf("%s %s", in.Kind, in.ID)
	},
	DescribeState: func(s any) string {
		if s.(string) == "" {
			return "free"
		}
		return "held by " + s.(string)
	},
}

// linOps builds the porcupine history of one name.
func linOps(hs *history, name string) []porcupine.Operation {
	inf := hs.last + 1
	lanes := map[int]int{}
	lane := func(p int, background bool) int {
		key := p * 2
		if background {
			key++
		}
		if _, ok := lanes[key]; !ok {
			lanes[key] = len(lanes)
		}
		return lanes[key]
	}
	var ops []porcupine.Operation
	add := func(p int, bg bool, in linIn, out linOut, call, ret int64) {
		ops = append(ops, porcupine.Operation{ClientId: lane(p, bg), Input: in, Output: out, Call: call, Return: ret})
	}
	grants := map[[2]uint64]string{}
	for _, h := range hs.holds {
		if len(h.names) != 1 || h.names[0] != name {
			continue
		}
		switch h.outcome {
		case "granted":
			grants[[2]uint64{h.session, h.token}] = h.id
			add(h.process, false, linIn{Kind: "acquire", ID: h.id, Steal: h.steal}, linOut{Granted: true}, h.invoke, h.complete)
			switch {
			case h.relOK && h.lostKind != "stolen" && h.lostKind != "session" && h.lostKind != notHolder:
				add(h.process, false, linIn{Kind: "release", ID: h.id}, linOut{}, h.relInvoke, h.relDone)
			case h.releasedBy() != 0:
				add(h.process, true, linIn{Kind: "release", ID: h.id}, linOut{}, h.complete, h.releasedBy())
			default:
				add(h.process, true, linIn{Kind: "release", ID: h.id}, linOut{}, h.complete, inf)
			}
		case "not-available":
			add(h.process, false, linIn{Kind: "acquire", ID: h.id}, linOut{NotAvailable: true}, h.invoke, h.complete)
		default:
			w, end := fmt.Sprintf("W%d", h.process), inf
			if h.settledBy() != 0 {
				end = h.settledBy()
			}
			add(h.process, false, linIn{Kind: "maybe", ID: w, Steal: h.steal}, linOut{}, h.invoke, end)
			add(h.process, true, linIn{Kind: "release", ID: w}, linOut{}, h.invoke, end)
		}
	}
	procOf := hs.processOfSession()
	for _, q := range hs.queries {
		var holders []string
		for _, l := range q.held {
			if l.Name != name {
				continue
			}
			id, ok := grants[[2]uint64{l.Session, l.Token}]
			if !ok {
				if p, known := procOf[l.Session]; known {
					id = fmt.Sprintf("W%d", p)
				} else {
					id = fmt.Sprintf("unknown(session %d, token %d)", l.Session, l.Token)
				}
			}
			holders = append(holders, id)
		}
		add(q.process, false, linIn{Kind: "query"}, linOut{Holders: holders}, q.invoke, q.complete)
	}
	return ops
}

func checkLin(hs *history, o checkOptions) checkResult {
	var names []string
	for _, name := range hs.names() {
		if linearizable(name) {
			names = append(names, name)
		}
	}
	return checkLinNames(hs, o, names...)
}

func checkLinNames(hs *history, o checkOptions, names ...string) checkResult {
	r := checkResult{Name: cLin, Valid: true}
	model := lockModel.ToModel()
	var checked []string
	for _, name := range names {
		ops := linOps(hs, name)
		res, info := porcupine.CheckOperationsVerbose(model, ops, o.LinTimeout)
		checked = append(checked, fmt.Sprintf("%s (%d ops)", name, len(ops)))
		r.porcupine(o, model, res, info, name, len(ops), "not linearizable", "linearizability-")
	}
	if len(checked) > 0 {
		r.note("checked %s", strings.Join(checked, ", "))
	}
	return r
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// porcupine fails r with porcupine's verdict on name's n operations when it
// is not Ok: undecided within the timeout, or violated (what says how;
// with o.Out, the visualisation is written to file+name+".html").
func (r *checkResult) porcupine(o checkOptions, model porcupine.Model, res porcupine.CheckResult, info porcupine.LinearizationInfo, name string, n int, what, file string) {
	switch res {
	case porcupine.Ok:
	case porcupine.Unknown:
		r.fail("%s: porcupine could not decide within %s (%d operations)", name, o.LinTimeout, n)
	default:
		msg := fmt.Sprintf("%s: %s (%d operations)", name, what, n)
		if o.Out != "" {
			path := filepath.Join(o.Out, file+safeName(name)+".html")
			if err := porcupine.VisualizePath(model, info, path); err == nil {
				msg += "; see " + path
			}
		}
		r.fail("%s", msg)
	}
}

// stringStateEqual and stringStateHash are the porcupine model functions
// of a state that is a string (a holder, a register's value): the lock
// model's and the records' register model's.
func stringStateEqual(a, b any) bool { return a.(string) == b.(string) }

func stringStateHash(s any) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s.(string)))
	return h.Sum64()
}

package main

import (
	"sort"
	"strings"
	"time"
)

// checkLiveness is checker (4): after healing, the cluster serves again.
//   - every operation completes (none is left without an outcome), and one
//     under way when the faults were healed completes within OpTimeout +
//     Settle of the heal;
//   - every request of a blocking workload (mutex, rw, scoped: plain
//     queued requests with a generous deadline) made Settle or more after
//     the heal is granted;
//   - once every client has closed its session, the namespace empties
//     (nothing held, nothing queued) within the bound the final phase
//     states.
func checkLiveness(hs *history, o checkOptions) checkResult {
	r := checkResult{Name: cLive, Valid: true}
	if hs.heal == 0 {
		r.fail("the history has no heal: the run did not end its faults")
	}
	bound := o.OpTimeout + o.Settle
	after := 0
	for _, h := range hs.holds {
		if h.complete == 0 {
			r.fail("%s (%s %v) invoked at %s never completed", h.id, h.workload, h.names, hs.at(h.invoke))
			continue
		}
		if h.granted() && h.relInvoke > 0 && h.relDone == 0 {
			r.fail("%s: its release invoked at %s never completed", h.id, hs.at(h.relInvoke))
		}
		if hs.heal == 0 {
			continue
		}
		if h.invoke < hs.heal && h.complete > hs.heal && time.Duration(h.complete-hs.heal) > bound {
			r.fail("%s under way at the heal (%s) completed only at %s, more than %s later", h.id, hs.at(hs.heal), hs.at(h.complete), bound)
		}
		if blocking(h.workload) && h.invoke >= hs.heal+int64(o.Settle) {
			after++
			if !h.granted() {
				r.fail("%s (%s %v) made at %s, %s after the heal, was not granted: %s %s; %s", h.id, h.workload, h.names,
					hs.at(h.invoke), time.Duration(h.invoke-hs.heal).Round(time.Millisecond), h.outcome, h.err, hs.blockers(h))
			}
		}
	}
	for _, op := range hs.final {
		if op.F == "quiesce" && op.Type != "ok" {
			r.fail("%s", op.Value)
		}
	}
	if hs.heal != 0 {
		r.note("bound for operations under way at the heal: %s; %d blocking requests made %s or more after the heal, each must be granted", bound, after, o.Settle)
	}
	return r
}

// checkDigest is checker (6): at the end every node has applied the same
// entries and its state machine has the same digest; no node crashed.
func checkDigest(hs *history) checkResult {
	r := checkResult{Name: cDigest, Valid: true}
	found := false
	for _, op := range hs.final {
		switch op.F {
		case "digest":
			found = true
			if op.Type != "ok" {
				r.fail("%s", op.Value)
			} else {
				r.note("%s", op.Value)
			}
		}
	}
	for _, c := range hs.crashes {
		r.fail("node crashed: %s", c)
	}
	if !found {
		r.fail("no digests were collected at the end")
	}
	return r
}

// checkApplied is checker (7): the nodes' running hashes of every applied
// log entry are equal at a common index (the smallest applied index once
// they caught up), and no node fenced itself after a checkpoint mismatch.
// Unlike the state digest, it sees a replica that applied other entries
// even when its state later re-converged.
func checkApplied(hs *history) checkResult {
	r := checkResult{Name: cApplied, Valid: true}
	found := false
	for _, op := range hs.final {
		if op.F != "applied-hash" {
			continue
		}
		found = true
		if op.Type != "ok" {
			r.fail("%s", op.Value)
		} else {
			r.note("%s", op.Value)
		}
	}
	if !found {
		r.fail("no applied hashes were compared at the end (a history from before the applied-hash check?)")
	}
	return r
}

// checkLost is checker (5): no acknowledged grant or release is lost.
//   - a query made after a release was acknowledged does not show the lock
//     (unless the holder lost it another way first);
//   - a query made after a grant was acknowledged, and answered while the
//     holder still believed it held the lock, shows it (unless a steal of
//     the name was under way);
//   - at the end, locks held on purpose by fresh clients show in a query
//     with their tokens (the final phase's holds are ordinary holds).
func checkLost(hs *history) checkResult {
	r := checkResult{Name: cLost, Valid: true}
	byKey := map[[2]uint64][]*hold{}
	for _, h := range hs.holds {
		if h.granted() {
			k := [2]uint64{h.session, h.token}
			byKey[k] = append(byKey[k], h)
		}
	}
	var steals []*hold
	for _, h := range hs.holds {
		if h.steal {
			steals = append(steals, h)
		}
	}
	// A steal may have taken h's lock if it was made before the query
	// answered and was not already granted before h was requested.
	stealUnderWay := func(h *hold, name string, before int64) bool {
		for _, s := range steals {
			if s != h && s.invoke < before && contains(s.names, name) && (s.complete == 0 || s.complete > h.invoke) {
				return true
			}
		}
		return false
	}
	granted := []*hold{}
	for _, h := range hs.holds {
		if h.granted() {
			granted = append(granted, h)
		}
	}
	sort.SliceStable(granted, func(i, j int) bool { return granted[i].complete < granted[j].complete })
	queries := append([]queryOp(nil), hs.queries...)
	sort.SliceStable(queries, func(i, j int) bool { return queries[i].invoke < queries[j].invoke })
	var active []*hold
	next, checked := 0, 0
	for _, q := range queries {
		for ; next < len(granted) && granted[next].complete < q.invoke; next++ {
			active = append(active, granted[next])
		}
		kept := active[:0]
		for _, h := range active {
			if h.end > q.invoke {
				kept = append(kept, h)
			}
		}
		active = kept
		shown := map[string]bool{}
		for _, l := range q.held {
			for _, h := range byKey[[2]uint64{l.Session, l.Token}] {
				shown[h.id+"\x00"+l.Name] = true
				if h.relOK && h.lostAt == 0 && h.relDone < q.invoke && contains(h.names, l.Name) {
					r.fail("%s: released (acknowledged at %s), yet the query made at %s shows it held (token %d)", h.id, hs.at(h.relDone), hs.at(q.invoke), h.token)
				}
			}
		}
		for _, h := range active {
			if h.end <= q.complete {
				continue
			}
			for _, n := range h.names {
				checked++
				if shown[h.id+"\x00"+n] || stealUnderWay(h, n, q.complete) {
					continue
				}
				r.fail("%s: granted %s (token %d, acknowledged at %s) and still believed held, but the query of %s..%s does not show it",
					h.id, n, h.token, hs.at(h.complete), hs.at(q.invoke), hs.at(q.complete))
			}
		}
	}
	finals := 0
	for _, h := range hs.holds {
		if strings.HasPrefix(h.workload, "final") {
			finals++
		}
	}
	r.note("%d (query, believed hold) pairs checked; %d holds of the final phase", checked, finals)
	return r
}

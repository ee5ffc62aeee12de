package main

import "sort"

// checkFIFO is checker (3): grants of a name follow its queue order, as
// far as the history can tell. Queries show each queue in order; a pending
// entry is matched to the operation of its session's process that was in
// flight during the query and was granted in that session. Of two requests seen queued one behind the
// other, the one in front must be granted with a token no higher than the
// one behind (equal: shared locks granted by one entry), and every request
// seen queued must be granted a token higher than any seen held then.
// Steal needs no exception: a steal is never queued, and it does not
// reorder the queue it jumps.
func checkFIFO(hs *history) checkResult {
	r := checkResult{Name: cFIFO, Valid: true}
	procOf := hs.processOfSession()
	byProc := map[int][]*hold{}
	for _, h := range hs.holds {
		byProc[h.process] = append(byProc[h.process], h)
	}
	// inFlight is the one request of process p on name in flight at some
	// time during q; nil if there is none, or more than one: a query that
	// took long (its node paused) may span a request granted, released and
	// followed by the next, and the pending entry is then the earlier one,
	// not the last invoked (docs/chaos.md, finding 6).
	inFlight := func(p int, name string, q queryOp) *hold {
		hs := byProc[p]
		i := sort.Search(len(hs), func(i int) bool { return hs[i].invoke > q.complete }) - 1
		var found *hold
		for ; i >= 0; i-- {
			h := hs[i]
			if h.complete != 0 && h.complete < q.invoke {
				break // every earlier request of p had completed before q
			}
			if !contains(h.names, name) {
				continue
			}
			if found != nil {
				return nil // ambiguous
			}
			found = h
		}
		return found
	}
	compared := 0
	for _, q := range hs.queries {
		byName := map[string][]QLock{}
		for _, l := range q.pending {
			byName[l.Name] = append(byName[l.Name], l)
		}
		for name, queue := range byName {
			var top uint64
			for _, l := range q.held {
				if l.Name == name {
					top = max(top, l.Token)
				}
			}
			sessions := map[uint64]int{}
			for _, l := range queue {
				sessions[l.Session]++
			}
			var seen []*hold
			for _, l := range queue {
				p, ok := procOf[l.Session]
				if !ok || sessions[l.Session] > 1 {
					continue // unknown, or ambiguous (an abandoned request of the same session)
				}
				h := inFlight(p, name, q)
				if h == nil || !h.granted() || h.session != l.Session {
					continue // not granted, or a request of an older session of the process
				}
				if h.token <= top {
					r.fail("%s: %s was queued at %s behind a holder with token %d, yet granted token %d", name, h.id, hs.at(q.complete), top, h.token)
				}
				for _, a := range seen {
					compared++
					if a.token > h.token {
						r.fail("%s: %s was queued ahead of %s at %s, yet granted later (token %d > %d)", name, a.id, h.id, hs.at(q.complete), a.token, h.token)
					}
				}
				seen = append(seen, h)
			}
		}
	}
	r.note("%d queries, %d ordered pairs of queued requests compared", len(hs.queries), compared)
	return r
}

package main

import (
	"fmt"
	"strings"
)

// blockers says what stood in the way of h, a request that was not
// granted, as the last query answered while it waited showed it: who held
// its names (with the hold of the history each lock belongs to, and what
// became of that hold's release) and what was queued on them. A liveness
// violation in a CI log then says what blocked the request, without the
// history file, which CI does not keep.
func (hs *history) blockers(h *hold) string {
	end := h.complete
	if end == 0 {
		end = hs.last
	}
	var q *queryOp
	for i := range hs.queries {
		c := &hs.queries[i]
		if c.invoke >= h.invoke && c.complete <= end && (q == nil || c.complete > q.complete) {
			q = c
		}
	}
	if q == nil {
		return "no query answered while it waited"
	}
	byLock := map[[2]uint64]*hold{}
	for _, g := range hs.holds {
		if g.granted() {
			byLock[[2]uint64{g.session, g.token}] = g
		}
	}
	describe := func(l QLock, held bool) string {
		s := fmt.Sprintf("%s %s by session %d (%s) request %d", l.Name, l.Mode, l.Session, l.Label, l.Request)
		if !held {
			return s
		}
		s += fmt.Sprintf(" token %d", l.Token)
		g := byLock[[2]uint64{l.Session, l.Token}]
		switch {
		case g == nil:
			s += ", a grant no client of the history heard of"
		case g.relInvoke == 0 && g.lostAt == 0:
			s += fmt.Sprintf(", hold %s, not released", g.id)
		case g.relInvoke == 0:
			s += fmt.Sprintf(", hold %s, lost by its holder at %s (%s), not released", g.id, hs.at(g.lostAt), g.lostKind)
		case g.relDone == 0:
			s += fmt.Sprintf(", hold %s, release invoked at %s, never completed", g.id, hs.at(g.relInvoke))
		case g.relOK:
			s += fmt.Sprintf(", hold %s, released (acknowledged at %s)", g.id, hs.at(g.relDone))
		default:
			s += fmt.Sprintf(", hold %s, release unconfirmed at %s: %s", g.id, hs.at(g.relDone), g.relErr)
		}
		return s
	}
	var held, queued []string
	for _, l := range q.held {
		if contains(h.names, l.Name) {
			held = append(held, describe(l, true))
		}
	}
	for _, l := range q.pending {
		if contains(h.names, l.Name) {
			queued = append(queued, describe(l, false))
		}
	}
	return fmt.Sprintf("the query answered at %s showed held: [%s]; queued: [%s]", hs.at(q.complete), strings.Join(held, "; "), strings.Join(queued, "; "))
}

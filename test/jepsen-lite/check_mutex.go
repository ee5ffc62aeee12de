package main

import (
	"sort"
	"time"
)

// stealGrace: a holder whose lock is stolen learns it a moment after the
// thief is granted; Steal is the documented way to break mutual exclusion
// and an overlap shorter than this (or ended by the holder learning of the
// theft) is not counted.
const stealGrace = time.Second

// checkMutex is checker (1), mutual exclusion:
//   - the fenced register never accepted a token lower than one it had
//     accepted, and no token was written by two different holds;
//   - a grant that completed before another request of the name was made
//     has a lower token (tokens are Raft indexes: they follow real time);
//     exclusive grants of a name never share a token;
//   - no two holds of a name, one of them exclusive, overlap in time while
//     both holders believed they held it: from the grant until the holder
//     began to release, learned of the loss (lock context cancelled:
//     jeopardy, expiry, theft) or was paused.
func checkMutex(hs *history) checkResult {
	r := checkResult{Name: cMutex, Valid: true}
	checkRegister(hs, &r)
	for _, name := range hs.names() {
		gs := hs.grantsOf(name)
		checkTokens(hs, name, gs, &r)
		checkOverlaps(hs, name, gs, &r)
	}
	return r
}

func checkRegister(hs *history, r *checkResult) {
	highest := map[string]uint64{}
	writer := map[string]map[uint64]string{}
	var accepted, refused, lateRefused, lateAccepted, pausedRefused int
	for _, w := range hs.writes {
		name := w.Names[0]
		h := hs.byID[w.Hold]
		late := h != nil && w.Time > h.end
		if w.Result == "accepted" {
			accepted++
			if w.Token < highest[name] {
				r.fail("register %s accepted token %d from %s at %s after it had accepted %d", name, w.Token, w.Hold, hs.at(w.Time), highest[name])
			}
			highest[name] = max(highest[name], w.Token)
			if writer[name] == nil {
				writer[name] = map[uint64]string{}
			}
			if prev, ok := writer[name][w.Token]; ok && prev != w.Hold && prev != "" {
				writer[name][w.Token] = "" // reported once
				r.fail("register %s: token %d written by two holds, %s and %s (the second at %s)", name, w.Token, prev, w.Hold, hs.at(w.Time))
			}
			if _, ok := writer[name][w.Token]; !ok {
				writer[name][w.Token] = w.Hold
			}
			if late {
				lateAccepted++
			}
			continue
		}
		refused++
		if late {
			lateRefused++
			if h.endedByPause {
				pausedRefused++
			}
		}
	}
	r.note("fenced register: %d writes accepted, %d refused; %d late writes (made after the writer's lock had ended) refused, %d of them by paused client processes",
		accepted, refused, lateRefused, pausedRefused)
	if lateAccepted > 0 {
		r.note("%d late writes were accepted because no newer holder had written yet (the window fencing cannot close)", lateAccepted)
	}
}

// checkTokens: grants follow real time; exclusive tokens are unique.
func checkTokens(hs *history, name string, gs []*hold, r *checkResult) {
	byToken := map[uint64]*hold{}
	for _, g := range gs {
		if o := byToken[g.token]; o != nil && (o.exclusive() || g.exclusive()) {
			r.fail("%s: holds %s and %s were both granted token %d", name, o.id, g.id, g.token)
		}
		if byToken[g.token] == nil || g.exclusive() {
			byToken[g.token] = g
		}
	}
	// gs is sorted by grant time; walk the requests by invoke time and keep
	// the highest token granted before each was made.
	inv := append([]*hold(nil), gs...)
	sort.SliceStable(inv, func(i, j int) bool { return inv[i].invoke < inv[j].invoke })
	k := 0
	var top *hold
	for _, b := range inv {
		for ; k < len(gs) && gs[k].complete < b.invoke; k++ {
			if top == nil || gs[k].token > top.token {
				top = gs[k]
			}
		}
		if top != nil && top.token >= b.token {
			r.fail("%s: %s was granted token %d at %s, before %s was requested at %s, yet %s got token %d (tokens must grow)",
				name, top.id, top.token, hs.at(top.complete), b.id, hs.at(b.invoke), b.id, b.token)
		}
	}
}

// checkOverlaps sweeps the believed holds of a name.
func checkOverlaps(hs *history, name string, gs []*hold, r *checkResult) {
	var active []*hold
	for _, b := range gs { // by grant time
		kept := active[:0]
		for _, a := range active {
			if a.end > b.complete {
				kept = append(kept, a)
			}
		}
		active = kept
		for _, a := range active {
			if !a.exclusive() && !b.exclusive() {
				continue
			}
			if stolen(a, b, gs) {
				continue
			}
			r.fail("%s: %s (%s, token %d) held it from %s to %s while %s (%s, token %d) held it from %s to %s",
				name, a.id, a.mode, a.token, hs.at(a.complete), hs.at(a.end), b.id, b.mode, b.token, hs.at(b.complete), hs.at(b.end))
		}
		if b.end > b.complete {
			active = append(active, b)
		}
	}
}

// stolen: the earlier of two holds in the log (the lower token) was
// stolen, by the later one or by a steal granted between them, and its
// holder was told so (lost: stolen; or not-holder, a record write
// refused), or stopped within stealGrace of the thief's grant. Steal is
// the documented way to break mutual exclusion: the victim learns of it a
// moment after the thief is granted, and the thief may even see its grant
// before the victim sees its own earlier one.
// The same holds when the thief has already passed the lock on: the victim
// may not have heard yet (its stream cut by a fault at that moment), and
// its belief is bounded by stealGrace from the theft either way.
func stolen(a, b *hold, grants []*hold) bool {
	later, earlier := b, a
	if a.token > b.token {
		later, earlier = a, b
	}
	told := earlier.lostKind == "stolen" || earlier.lostKind == notHolder
	if later.steal {
		return told || time.Duration(earlier.end-later.complete) <= stealGrace
	}
	for _, g := range grants {
		if g.steal && g.token > earlier.token && g.token < later.token &&
			(told || time.Duration(earlier.end-g.complete) <= stealGrace) {
			return true
		}
	}
	return false
}

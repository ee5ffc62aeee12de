package main

import (
	"context"
	"fmt"
	"time"

	"github.com/lockcluster/lockcluster"
)

// The stale-leader nemesis makes the shape of docs/chaos.md finding 3: a
// leader paused while it has entries of its own that nobody else has (an
// uncommitted tail), and resumed into a term that another leader already
// runs. In hashicorp/raft a follower sets its commit index to
// min(leader's commit, its own last index), so such a node could apply its
// stale tail when the new leader's first AppendEntries reaches it; the
// applied-hash checker (final.go) sees any divergence that ever happened.
//
//  1. Clients pinned to the leader L (its endpoint only) start writing, so
//     L has requests of its own in flight and queued at its socket.
//  2. A follower F is killed and restarted on its data: L's replication to
//     F restarts from F's last index, as in the run of finding 3.
//  3. As soon as F answers again, or (half the time) once F has applied
//     what L had committed, L is SIGSTOPped.
//  4. L stays stopped until the other two elect a leader of a newer term
//     (polled; bounded by staleLeaderBound), and a little longer, so that
//     the new leader commits entries past L's tail.
//  5. L is resumed into the new term: its session tracker finds every
//     deadline passed and proposes expiries, its queued client requests are
//     proposed, all before it hears of the new term. The pinned clients go
//     on a second longer, then stop.

const nStaleLeader = "stale-leader"

// staleLeaderBound bounds each wait of the stale-leader nemesis: for a
// leader, for the restarted follower, for the new leader (nemesis.bound;
// tests shorten it).
const staleLeaderBound = 20 * time.Second

// nodeState is what the nemesis needs of a node's status.
type nodeState struct {
	ok      bool // it answered
	leader  bool
	term    uint64
	applied uint64
	commit  uint64
}

// adminStates asks the nodes idx for their status with the admin API; a
// paused node (which it must not wait for) is not among them.
func adminStates(c Cluster) func(ctx context.Context, idx []int) []nodeState {
	return func(ctx context.Context, idx []int) []nodeState {
		out := make([]nodeState, len(idx))
		eps := c.Endpoints()
		sub := make([]string, len(idx))
		for k, i := range idx {
			sub[k] = eps[i]
		}
		a, err := lockcluster.DialAdmin(sub)
		if err != nil {
			return out
		}
		defer a.Close()
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		for k, st := range a.Status(sctx) {
			out[k] = nodeState{ok: st.Err == "", leader: st.Err == "" && st.State == "Leader", term: st.Term,
				applied: st.AppliedIndex, commit: st.CommitIndex}
		}
		return out
	}
}

// pollNodes calls cond with the states of idx until it returns true, ctx
// ends or d passes; it reports whether cond held.
func (nm *nemesis) pollNodes(ctx context.Context, idx []int, d time.Duration, cond func([]nodeState) bool) bool {
	deadline := time.Now().Add(d)
	for ctx.Err() == nil {
		if cond(nm.states(ctx, idx)) {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		sleepCtx(ctx, nm.pollEvery)
	}
	return false
}

func (nm *nemesis) staleLeader(ctx context.Context) error {
	size := nm.c.Size()
	if size < 3 {
		return errUnsupported
	}
	all := make([]int, size)
	for i := range all {
		all[i] = i
	}
	// 1. The leader, and its term.
	l, lterm := -1, uint64(0)
	if !nm.pollNodes(ctx, all, nm.bound, func(sts []nodeState) bool {
		for i, st := range sts {
			if st.leader {
				l, lterm = i, st.term
				return true
			}
		}
		return false
	}) {
		return fmt.Errorf("no leader within %s", nm.bound)
	}
	var others []int
	for i := range size {
		if i != l {
			others = append(others, i)
		}
	}
	f := others[nm.rng.Intn(len(others))]
	if nm.pin != nil {
		stop := nm.pin(l, nm.rng.Int63())
		defer func() {
			nm.hold(ctx, 500*time.Millisecond, 2*time.Second) // their queued requests reach L
			stop()
		}()
	}

	// 2. Restart a follower.
	nm.record(nStaleLeader, "start", fmt.Sprintf("node%d (follower) killed; node%d (leader, term %d) will be paused when it is back", f, l, lterm))
	if err := nm.c.Kill(f); err != nil {
		return err
	}
	nm.counts[nStaleLeader]++
	nm.hold(ctx, time.Second, 3*time.Second)
	if err := nm.c.Restart(f); err != nil {
		return err
	}

	// 3. Wait until it answers, or until it has caught up with L.
	caughtUp := nm.rng.Intn(2) == 0
	var target uint64
	deposed := false
	back := nm.pollNodes(ctx, []int{f, l}, nm.bound, func(sts []nodeState) bool {
		if sts[1].ok && (!sts[1].leader || sts[1].term != lterm) {
			deposed = true
			return true
		}
		if !sts[0].ok {
			return false
		}
		if !caughtUp {
			return true
		}
		if target == 0 {
			target = sts[1].commit
		}
		return target > 0 && sts[0].applied >= target
	})
	if ctx.Err() != nil {
		return nil
	}
	if deposed {
		nm.record(nStaleLeader, "stop", fmt.Sprintf("node%d no longer led term %d when node%d came back; not paused", l, lterm, f))
		return nil
	}
	if !back && (!caughtUp || target == 0) {
		// With F down, pausing L would leave no majority: nothing to see.
		nm.record(nStaleLeader, "stop", fmt.Sprintf("node%d did not answer within %s; node%d not paused", f, nm.bound, l))
		return nil
	}
	when := "as soon as it answered"
	if caughtUp {
		when = fmt.Sprintf("once it had applied index %d", target)
		if !back {
			when = fmt.Sprintf("although it had not applied index %d within %s", target, nm.bound)
		}
	}

	// 4. Pause L until another node leads in a newer term.
	if err := nm.c.Pause(l); err != nil {
		return err
	}
	nm.record(nStaleLeader, "pause", fmt.Sprintf("node%d (leader, term %d) paused; node%d restarted %s", l, lterm, f, when))
	newLeader, newTerm := -1, uint64(0)
	elected := nm.pollNodes(ctx, others, nm.bound, func(sts []nodeState) bool {
		for k, st := range sts {
			if st.leader && st.term > lterm {
				newLeader, newTerm = others[k], st.term
				return true
			}
		}
		return false
	})
	nm.hold(ctx, 0, 1500*time.Millisecond)

	// 5. Resume it into the new term.
	desc := fmt.Sprintf("node%d resumed; node%d leads in term %d", l, newLeader, newTerm)
	if !elected {
		desc = fmt.Sprintf("node%d resumed; no other node led in a term above %d within %s", l, lterm, nm.bound)
	}
	nm.record(nStaleLeader, "stop", desc)
	return nm.c.Resume(l)
}

package raftnode

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestThreeNodeCluster(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	leader := c.waitLeader()
	var want []string

	t.Run("propose on leader is applied everywhere", func(t *testing.T) {
		res, err := leader.node.Propose(ctxTimeout(t, 5*time.Second), []byte("a"))
		if err != nil {
			t.Fatalf("propose: %v", err)
		}
		if res.Index == 0 || res.Response != 1 {
			t.Fatalf("result = %+v, want a non-zero index and response 1 (the FSM's count)", res)
		}
		want = append(want, "a")
		c.waitEntries(want, c.nodes...)
		for _, tn := range c.nodes {
			if got := tn.node.AppliedIndex(); got < res.Index {
				t.Errorf("%s: AppliedIndex = %d, want >= %d", tn.id, got, res.Index)
			}
		}
	})

	t.Run("propose on follower returns ErrNotLeader with the leader", func(t *testing.T) {
		for _, f := range c.followers(leader) {
			_, err := f.node.Propose(ctxTimeout(t, 5*time.Second), []byte("nope"))
			if !errors.Is(err, ErrNotLeader) || !errors.Is(err, ErrNotApplied) {
				t.Fatalf("%s: err = %v, want ErrNotLeader and ErrNotApplied", f.id, err)
			}
			var nle *NotLeaderError
			if !errors.As(err, &nle) || nle.LeaderID != leader.id || nle.LeaderAddr != leader.addr {
				t.Fatalf("%s: hint = %+v, want leader %s at %s", f.id, nle, leader.id, leader.addr)
			}
		}
	})

	t.Run("read barrier", func(t *testing.T) {
		res, err := leader.node.Propose(ctxTimeout(t, 5*time.Second), []byte("r"))
		if err != nil {
			t.Fatalf("propose: %v", err)
		}
		want = append(want, "r")
		if err := leader.node.ReadBarrier(ctxTimeout(t, 5*time.Second)); err != nil {
			t.Fatalf("ReadBarrier on leader: %v", err)
		}
		if got := leader.fsm.Entries(); !slices.Equal(got, want) {
			t.Fatalf("leader FSM after ReadBarrier = %q, want %q", got, want)
		}
		if got := leader.node.AppliedIndex(); got < res.Index {
			t.Fatalf("AppliedIndex = %d after ReadBarrier, want >= %d", got, res.Index)
		}
		for _, f := range c.followers(leader) {
			err := f.node.ReadBarrier(ctxTimeout(t, 5*time.Second))
			var nle *NotLeaderError
			if !errors.As(err, &nle) || nle.LeaderID != leader.id {
				t.Fatalf("ReadBarrier on %s: err = %v, want NotLeaderError naming %s", f.id, err, leader.id)
			}
		}
	})

	t.Run("64 concurrent proposals", func(t *testing.T) {
		const n = 64
		var wg sync.WaitGroup
		indexes := make([]uint64, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				res, err := leader.node.Propose(ctxTimeout(t, 10*time.Second), fmt.Appendf(nil, "c%02d", i))
				indexes[i], errs[i] = res.Index, err
			})
		}
		wg.Wait()
		seen := map[uint64]bool{}
		for i, err := range errs {
			if err != nil {
				t.Fatalf("proposal %d: %v", i, err)
			}
			if seen[indexes[i]] {
				t.Fatalf("index %d returned twice", indexes[i])
			}
			seen[indexes[i]] = true
		}
		got := leader.fsm.Entries()
		if len(got) != len(want)+n {
			t.Fatalf("leader applied %d entries, want %d", len(got), len(want)+n)
		}
		concurrent := slices.Clone(got[len(want):])
		slices.Sort(concurrent)
		for i, v := range concurrent {
			if v != fmt.Sprintf("c%02d", i) {
				t.Fatalf("applied concurrent entries %q, want c00..c63 once each", concurrent)
			}
		}
		want = got
		c.waitEntries(want, c.nodes...)
	})

	t.Run("members and leadership", func(t *testing.T) {
		for _, tn := range c.nodes {
			members, err := tn.node.Members()
			if err != nil {
				t.Fatalf("Members on %s: %v", tn.id, err)
			}
			if len(members) != 3 {
				t.Fatalf("Members on %s = %+v, want 3", tn.id, members)
			}
			for _, m := range members {
				if m.Suffrage != "Voter" || m.Leader != (m.ID == leader.id) {
					t.Fatalf("Members on %s = %+v, want 3 voters with %s as leader", tn.id, members, leader.id)
				}
			}
			ch, cancel := tn.node.SubscribeLeadership()
			if got := <-ch; got != (tn == leader) {
				t.Errorf("%s: first leadership value = %v, want %v", tn.id, got, tn == leader)
			}
			cancel()
			if st := tn.node.State(); st != map[bool]string{true: "Leader", false: "Follower"}[tn == leader] {
				t.Errorf("%s: State = %q", tn.id, st)
			}
		}
		if s := leader.node.Stats(); s["state"] != "Leader" || s["fsm_applied_index"] == "" {
			t.Errorf("Stats = %v", s)
		}
	})
}

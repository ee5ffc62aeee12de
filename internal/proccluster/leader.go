package proccluster

import (
	"context"
	"fmt"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/fsm"
)

// pollEvery is how often the waits below ask the nodes again.
const pollEvery = 20 * time.Millisecond

// Leader asks every node at addrs once and returns the index of one that
// reports itself leader, or -1.
func Leader(ctx context.Context, addrs []string, opts ...lockcluster.Option) int {
	a, err := lockcluster.DialAdmin(addrs, opts...)
	if err != nil {
		return -1
	}
	defer a.Close()
	return leaderOf(ctx, a)
}

func leaderOf(ctx context.Context, a *lockcluster.Admin) int {
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for i, st := range a.Status(sctx) {
		if st.Err == "" && st.State == "Leader" {
			return i
		}
	}
	return -1
}

// WaitLeader polls the nodes at addrs until one reports itself leader and
// returns its index; it gives up when d passes or ctx ends.
func WaitLeader(ctx context.Context, d time.Duration, addrs []string, opts ...lockcluster.Option) (int, error) {
	a, err := lockcluster.DialAdmin(addrs, opts...)
	if err != nil {
		return -1, err
	}
	defer a.Close()
	i := -1
	if !poll(ctx, d, pollEvery, func() bool { i = leaderOf(ctx, a); return i >= 0 }) {
		return -1, fmt.Errorf("no leader within %s%s", d, ended(ctx))
	}
	return i, nil
}

// WaitCaughtUp polls the nodes at addrs until every one answers, one
// leads, and every one has applied the leader's commit index as it was at
// the first answer from a leader; it gives up when d passes or ctx ends.
func WaitCaughtUp(ctx context.Context, d time.Duration, addrs []string, opts ...lockcluster.Option) error {
	a, err := lockcluster.DialAdmin(addrs, opts...)
	if err != nil {
		return err
	}
	defer a.Close()
	var target uint64
	ok := poll(ctx, d, pollEvery, func() bool {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		sts := a.Status(sctx)
		cancel()
		ok := true
		for _, st := range sts {
			ok = ok && st.Err == "" && st.Unfit == "" && st.LeaderID != ""
			if st.Err == "" && st.State == "Leader" && target == 0 {
				target = st.CommitIndex
			}
		}
		for _, st := range sts {
			ok = ok && target > 0 && st.AppliedIndex >= target
		}
		return ok
	})
	if !ok {
		return fmt.Errorf("the cluster did not catch up within %s%s", d, ended(ctx))
	}
	return nil
}

// poll calls cond every `every` until it holds (true), or d passes or ctx
// ends (false).
func poll(ctx context.Context, d, every time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
		case <-time.After(every):
		}
	}
	return true
}

// ended says why ctx ended, "" if it has not.
func ended(ctx context.Context) string {
	if err := ctx.Err(); err != nil {
		return " (" + err.Error() + ")"
	}
	return ""
}

// WaitGroups polls the nodes at addrs until, on a cluster of several Raft
// groups, every node answers, every group's replica there knows a leader
// and is fit, and the groups' slots add up to all 4,096 (the initial
// spread is done: every namespace is served); it returns at the first
// answers on a cluster of one group. It gives up when d passes or ctx
// ends.
func WaitGroups(ctx context.Context, d time.Duration, addrs []string, opts ...lockcluster.Option) error {
	a, err := lockcluster.DialAdmin(addrs, opts...)
	if err != nil {
		return err
	}
	defer a.Close()
	ok := poll(ctx, d, pollEvery, func() bool {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		sts := a.Status(sctx)
		cancel()
		for _, st := range sts {
			if st.Err != "" {
				return false
			}
			slots := 0
			for _, g := range st.Groups {
				if g.LeaderID == "" || g.Unfit != "" {
					return false
				}
				slots += int(g.Slots)
			}
			if len(st.Groups) > 0 && slots != fsm.Slots {
				return false
			}
		}
		// The sum holds before the spread begins too (group 0 owns every
		// slot): each node's health says ready only once its replicas show
		// the spread done.
		for _, addr := range addrs {
			if !healthy(ctx, addr, opts) {
				return false
			}
		}
		return true
	})
	if !ok {
		return fmt.Errorf("the groups did not all serve within %s%s", d, ended(ctx))
	}
	return nil
}

// Groups waits up to d for every group of the cluster to serve (WaitGroups).
func (c *Cluster) Groups(ctx context.Context, d time.Duration) error {
	if err := WaitGroups(ctx, d, c.Addrs(), c.cfg.Admin...); err != nil {
		return fmt.Errorf("%w; the nodes' logs are in %s", err, c.Dir)
	}
	return nil
}

// healthy reports whether the node at addr answers its health check
// serving (gRPC health: a leader in every group, fit, the spread done).
func healthy(ctx context.Context, addr string, opts []lockcluster.Option) bool {
	a, err := lockcluster.DialAdmin([]string{addr}, opts...)
	if err != nil {
		return false
	}
	defer a.Close()
	hctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return a.Health(hctx) == nil
}

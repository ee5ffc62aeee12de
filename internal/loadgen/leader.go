package loadgen

import (
	"context"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/proccluster"
)

// LeaderFirst reorders addrs so that the leader's endpoint comes first, so
// that a benchmark measures the leader's path rather than forwarding.
func LeaderFirst(ctx context.Context, addrs []string) []string {
	return first(addrs, proccluster.Leader(ctx, addrs))
}

// GroupLeadersFirst is LeaderFirst for a cluster of several Raft groups:
// for each namespace, addrs with the endpoint of the node that leads the
// namespace's group (group(ns)) first, as LeaderFirst puts group 0's
// leader first for a cluster of one group. A namespace whose group has no
// leader in the nodes' answers keeps addrs as they are.
func GroupLeadersFirst(ctx context.Context, addrs, namespaces []string, group func(ns string) int) map[string][]string {
	leads := map[int]int{} // group -> index in addrs
	if a, err := lockcluster.DialAdmin(addrs); err == nil {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		for i, st := range a.Status(sctx) {
			for _, g := range st.Groups {
				if g.State == "Leader" {
					leads[int(g.Group)] = i
				}
			}
		}
		cancel()
		a.Close()
	}
	out := make(map[string][]string, len(namespaces))
	for _, ns := range namespaces {
		i, ok := leads[group(ns)]
		if !ok {
			i = -1
		}
		out[ns] = first(addrs, i)
	}
	return out
}

// first is addrs with addrs[i] moved to the front (addrs itself when i is
// out of range).
func first(addrs []string, i int) []string {
	if i < 0 || i >= len(addrs) {
		return addrs
	}
	return append([]string{addrs[i]}, append(append([]string(nil), addrs[:i]...), addrs[i+1:]...)...)
}

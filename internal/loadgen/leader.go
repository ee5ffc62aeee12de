package loadgen

import (
	"context"

	"github.com/lockcluster/lockcluster/internal/proccluster"
)

// LeaderFirst reorders addrs so that the leader's endpoint comes first, so
// that a benchmark measures the leader's path rather than forwarding.
func LeaderFirst(ctx context.Context, addrs []string) []string {
	i := proccluster.Leader(ctx, addrs)
	if i < 0 {
		return addrs
	}
	return append([]string{addrs[i]}, append(append([]string(nil), addrs[:i]...), addrs[i+1:]...)...)
}

package loadgen

import (
	"context"
	"time"

	"github.com/lockcluster/lockcluster"
)

// LeaderFirst reorders addrs so that the leader's endpoint comes first, so
// that a benchmark measures the leader's path rather than forwarding.
func LeaderFirst(ctx context.Context, addrs []string) []string {
	a, err := lockcluster.DialAdmin(addrs)
	if err != nil {
		return addrs
	}
	defer a.Close()
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for i, st := range a.Status(sctx) {
		if st.Err == "" && st.State == "Leader" {
			return append([]string{addrs[i]}, append(append([]string(nil), addrs[:i]...), addrs[i+1:]...)...)
		}
	}
	return addrs
}

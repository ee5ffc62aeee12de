package loadgen

import (
	"context"
	"time"

	"github.com/lockcluster/lockcluster/internal/proccluster"
)

// StartLocal starts a cluster of n 'lockcluster serve' processes of bin on
// loopback (proccluster), with fsync on (the default), data and logs in a
// temporary directory and extra flags for every serve, and waits for a
// leader. Stop stops it and removes the directory unless Keep is set.
func StartLocal(ctx context.Context, bin string, n int, extra []string) (*proccluster.Cluster, error) {
	return proccluster.Start(ctx, proccluster.Config{Bin: bin, Nodes: n, TempPrefix: "lockcluster-bench-",
		Extra: func(*proccluster.Cluster, int) []string { return append([]string{"--log-level", "warn"}, extra...) }}, 30*time.Second)
}

// Meter starts measuring the CPU of every node of c and of this process.
func Meter(ctx context.Context, c *proccluster.Cluster) *CPUMeter {
	leader, _ := c.Leader(ctx, 5*time.Second)
	var names []string
	var pids []int
	for i, nd := range c.Nodes {
		role := "follower"
		if i == leader {
			role = "leader"
		}
		names = append(names, nd.ID+" ("+role+")")
		pids = append(pids, c.PID(i))
	}
	return StartCPU(append(names, "bench (this process)"), append(pids, 0))
}

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/proccluster"
)

// Cluster drives the system under test: local processes (local.go) or the
// docker compose cluster (docker.go). Nodes are numbered 0..Size()-1.
type Cluster interface {
	// Start brings every node up and waits for a leader.
	Start(ctx context.Context) error
	Size() int
	// Endpoints are the nodes' gRPC addresses, for clients.
	Endpoints() []string
	// HTTPAddr is node i's HTTP address (for /debug/digest).
	HTTPAddr(i int) string
	Kill(i int) error    // SIGKILL
	Restart(i int) error // start a killed node again on its data
	Pause(i int) error   // SIGSTOP
	Resume(i int) error  // SIGCONT
	// Net is the network fault injector, nil if there is none.
	Net() Network
	// HealAll ends every fault: resumes paused nodes, restarts killed
	// ones, restores the network.
	HealAll() error
	// Crashes lists the nodes that exited without being killed.
	Crashes() []string
	// Close stops every node and releases what Start took.
	Close() error
}

// Network cuts and slows the links between nodes.
type Network interface {
	// Cut makes every link i→j with cut[i][j] drop traffic (and heals the
	// others). A driver that cannot cut exactly this returns errUnsupported.
	Cut(cut [][]bool) error
	// Delay adds d to every link (0: none). errUnsupported if it cannot.
	Delay(d time.Duration) error
	// Heal restores every link.
	Heal() error
}

var errUnsupported = errors.New("not supported by this cluster driver")

// leader returns the index of a node that reports itself leader, or -1.
func leader(ctx context.Context, c Cluster) int { return proccluster.Leader(ctx, c.Endpoints()) }

// waitLeader polls until some node leads, or d passes.
func waitLeader(ctx context.Context, c Cluster, d time.Duration) (int, error) {
	return proccluster.WaitLeader(ctx, d, c.Endpoints())
}

// waitReady polls until every node knows the leader and its client
// address (so that it forwards), or d passes.
func waitReady(ctx context.Context, c Cluster, d time.Duration) error {
	a, err := lockcluster.DialAdmin(c.Endpoints())
	if err != nil {
		return err
	}
	defer a.Close()
	deadline := time.Now().Add(d)
	last := "no answer"
	for time.Now().Before(deadline) && ctx.Err() == nil {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		sts := a.Status(sctx)
		cancel()
		ready, groups := true, false
		for _, st := range sts {
			if st.Err != "" || st.Unfit != "" || st.LeaderAddr == "" {
				ready, last = false, fmt.Sprintf("%s: leader %q at %q %s", st.Addr, st.LeaderID, st.LeaderAddr, st.Err)
			}
			groups = groups || len(st.Groups) > 0
		}
		if ready && groups {
			// Several groups: every group led on every node, the spread done.
			return proccluster.WaitGroups(ctx, time.Until(deadline), c.Endpoints())
		}
		if ready {
			return nil
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	return fmt.Errorf("the nodes did not all know the leader's address within %s (%s)", d, last)
}

// digestOf reads node i's /debug/digest.
func digestOf(ctx context.Context, c Cluster, i int) (proccluster.Digest, error) {
	d, err := proccluster.ReadDigest(ctx, c.HTTPAddr(i), 0, "")
	if err != nil {
		return d, fmt.Errorf("node %d: %w", i, err)
	}
	return d, nil
}

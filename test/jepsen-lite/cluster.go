package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/lockcluster/lockcluster"
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
func leader(ctx context.Context, c Cluster) int {
	a, err := lockcluster.DialAdmin(c.Endpoints())
	if err != nil {
		return -1
	}
	defer a.Close()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for i, st := range a.Status(sctx) {
		if st.Err == "" && st.State == "Leader" {
			return i
		}
	}
	return -1
}

// waitLeader polls until some node leads, or d passes.
func waitLeader(ctx context.Context, c Cluster, d time.Duration) (int, error) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if i := leader(ctx, c); i >= 0 {
			return i, nil
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	return -1, fmt.Errorf("no leader within %s", d)
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
		ready := true
		for _, st := range sts {
			if st.Err != "" || st.LeaderAddr == "" {
				ready, last = false, fmt.Sprintf("%s: leader %q at %q %s", st.Addr, st.LeaderID, st.LeaderAddr, st.Err)
			}
		}
		if ready {
			return nil
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	return fmt.Errorf("the nodes did not all know the leader's address within %s (%s)", d, last)
}

// nodeDigest is a node's answer to GET /debug/digest.
type nodeDigest struct {
	ID     string `json:"id"`
	Index  uint64 `json:"index"`
	Digest string `json:"digest"`
	Stable bool   `json:"stable"`
	// The running hash of every applied log entry (raftnode): the last
	// index folded into it (nil: a lockcluster without the running hash)
	// and the hash through it ("" when the node does not know its chain,
	// e.g. restored from a snapshot written before it had one).
	AppliedIndex *uint64 `json:"applied_index"`
	AppliedHash  string  `json:"applied_hash"`
	// Diverged is why the node fenced itself (a checkpoint did not match
	// its own hash), "" if it did not.
	Diverged string `json:"diverged"`
	// With ?at=N: the hash at exactly index N, or "" and why not.
	AtIndex uint64 `json:"at_index"`
	AtHash  string `json:"at_hash"`
	AtError string `json:"at_error"`
}

func digestOf(ctx context.Context, c Cluster, i int) (nodeDigest, error) {
	return fetchDigest(ctx, c, i, "")
}

// digestAt asks node i for its running hash at exactly index at.
func digestAt(ctx context.Context, c Cluster, i int, at uint64) (nodeDigest, error) {
	return fetchDigest(ctx, c, i, fmt.Sprintf("?at=%d", at))
}

func fetchDigest(ctx context.Context, c Cluster, i int, query string) (nodeDigest, error) {
	var d nodeDigest
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.HTTPAddr(i)+"/debug/digest"+query, nil)
	if err != nil {
		return d, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return d, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return d, fmt.Errorf("node %d: /debug/digest: %s (a lockcluster without the debug endpoint?)", i, resp.Status)
	}
	return d, json.NewDecoder(resp.Body).Decode(&d)
}

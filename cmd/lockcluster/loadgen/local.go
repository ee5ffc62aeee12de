package loadgen

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/test/ports"
)

// LocalCluster is a cluster of 'lockcluster serve' processes on loopback,
// with fsync on (the default) and data in a temporary directory.
type LocalCluster struct {
	Bin   string
	Dir   string
	Nodes []*LocalNode
	Keep  bool // Stop leaves the data directory and the logs
}

// LocalNode is one serve process.
type LocalNode struct {
	ID, GRPC, Raft, HTTP string
	Args                 []string
	LogPath              string
	cmd                  *exec.Cmd
	done                 chan struct{}
}

// PID is the node's process id (0 when it is not running).
func (n *LocalNode) PID() int {
	if n.cmd == nil || n.cmd.Process == nil || n.Exited() {
		return 0
	}
	return n.cmd.Process.Pid
}

// Exited reports whether the process has exited.
func (n *LocalNode) Exited() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

// freeAddr picks a port for a local node below the ephemeral range, so it
// stays free until the node binds it; the benchmarks take 30000-32767 (see
// ports.Free).
func freeAddr() (string, error) { return ports.Free(30000, 32768) }

// StartLocal starts n nodes of bin ('lockcluster serve', with extra flags
// appended) and waits for a leader.
func StartLocal(ctx context.Context, bin string, n int, extra []string) (*LocalCluster, error) {
	dir, err := os.MkdirTemp("", "lockcluster-bench-")
	if err != nil {
		return nil, err
	}
	c := &LocalCluster{Bin: bin, Dir: dir}
	var peers []string
	for i := range n {
		nd := &LocalNode{ID: fmt.Sprintf("node%d", i), LogPath: filepath.Join(dir, fmt.Sprintf("node%d.log", i))}
		for _, a := range []*string{&nd.GRPC, &nd.Raft, &nd.HTTP} {
			if *a, err = freeAddr(); err != nil {
				c.Stop()
				return nil, err
			}
		}
		c.Nodes = append(c.Nodes, nd)
		peers = append(peers, nd.ID+"="+nd.Raft)
	}
	for _, nd := range c.Nodes {
		nd.Args = append([]string{"serve", "--id", nd.ID, "--data-dir", filepath.Join(dir, nd.ID), "--grpc-addr", nd.GRPC,
			"--raft-addr", nd.Raft, "--http-addr", nd.HTTP, "--bootstrap", strings.Join(peers, ","), "--log-level", "warn"}, extra...)
		if err := c.start(nd); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if _, err := c.Leader(ctx, 30*time.Second); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *LocalCluster) start(nd *LocalNode) error {
	f, err := os.OpenFile(nd.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	nd.cmd = exec.Command(c.Bin, nd.Args...)
	nd.cmd.Stdout, nd.cmd.Stderr = f, f
	nd.cmd.Env = append(os.Environ(), "NO_COLOR=1")
	if err := nd.cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting %s: %w", nd.ID, err)
	}
	nd.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); f.Close(); close(done) }(nd.cmd, nd.done)
	return nil
}

// Addrs are the nodes' gRPC addresses.
func (c *LocalCluster) Addrs() []string {
	var out []string
	for _, nd := range c.Nodes {
		out = append(out, nd.GRPC)
	}
	return out
}

// Leader waits up to d for a running node that reports itself leader and
// returns its index.
func (c *LocalCluster) Leader(ctx context.Context, d time.Duration) (int, error) {
	a, err := lockcluster.DialAdmin(c.Addrs())
	if err != nil {
		return -1, err
	}
	defer a.Close()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		sts := a.Status(sctx)
		cancel()
		for i, st := range sts {
			if st.Err == "" && st.State == "Leader" && !c.Nodes[i].Exited() {
				return i, nil
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return -1, fmt.Errorf("no leader within %s; logs in %s", d, c.Dir)
}

// Kill SIGKILLs node i and waits until it is gone.
func (c *LocalCluster) Kill(i int) {
	nd := c.Nodes[i]
	if nd.PID() != 0 {
		nd.cmd.Process.Signal(syscall.SIGKILL)
		<-nd.done
	}
}

// Restart starts node i again on its data directory.
func (c *LocalCluster) Restart(i int) error { return c.start(c.Nodes[i]) }

// WaitCaughtUp waits until every node runs, one leads, and every node has
// applied the leader's commit index as it was when the wait began.
func (c *LocalCluster) WaitCaughtUp(ctx context.Context, d time.Duration) error {
	a, err := lockcluster.DialAdmin(c.Addrs())
	if err != nil {
		return err
	}
	defer a.Close()
	deadline := time.Now().Add(d)
	var target uint64
	for time.Now().Before(deadline) && ctx.Err() == nil {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		sts := a.Status(sctx)
		cancel()
		ok := true
		for _, st := range sts {
			if st.Err != "" || st.LeaderID == "" {
				ok = false
				continue
			}
			if st.State == "Leader" && target == 0 {
				target = st.CommitIndex
			}
		}
		for _, st := range sts {
			ok = ok && target > 0 && st.AppliedIndex >= target
		}
		if ok {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("the cluster did not catch up within %s; logs in %s", d, c.Dir)
}

// Stop stops every node (SIGTERM, then SIGKILL after 15s) and removes the
// data directory.
func (c *LocalCluster) Stop() {
	for _, nd := range c.Nodes {
		if nd.PID() != 0 {
			nd.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, nd := range c.Nodes {
		if nd.done == nil {
			continue
		}
		select {
		case <-nd.done:
		case <-time.After(15 * time.Second):
			nd.cmd.Process.Kill()
			<-nd.done
		}
	}
	if !c.Keep {
		os.RemoveAll(c.Dir)
	}
}

// Meter starts measuring the CPU of every node and of this process.
func (c *LocalCluster) Meter(ctx context.Context) *CPUMeter {
	leader, _ := c.Leader(ctx, 5*time.Second)
	var names []string
	var pids []int
	for i, nd := range c.Nodes {
		role := "follower"
		if i == leader {
			role = "leader"
		}
		names = append(names, nd.ID+" ("+role+")")
		pids = append(pids, nd.PID())
	}
	return StartCPU(append(names, "bench (this process)"), append(pids, 0))
}

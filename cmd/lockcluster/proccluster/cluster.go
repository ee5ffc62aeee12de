package proccluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lockcluster/lockcluster"
)

// Config describes a cluster to start.
type Config struct {
	Bin   string // the lockcluster binary the nodes run
	Nodes int
	// Dir holds node i's data in Dir/node<i> and its log (stdout and
	// stderr, appended across restarts) in Dir/node<i>.log ("": a new
	// temporary directory named TempPrefix*). Stop removes it unless Keep
	// is set.
	Dir        string
	TempPrefix string
	Keep       bool
	LogDir     string // where the logs go instead, if set
	// Host is the address the nodes listen on (default 127.0.0.1).
	Host string
	// BasePort 0 picks free ports (FreeAddr); otherwise node i serves gRPC
	// on BasePort+10i, raft on +1 and HTTP on +2 ('lockcluster dev').
	BasePort int
	// Extra returns more serve flags for node i (TLS, auth, log level,
	// --raft-dial), once every node's addresses are known.
	Extra func(c *Cluster, i int) []string
	// Admin is what an admin client needs to ask the nodes (TLS, token).
	Admin []lockcluster.Option
	// StartMarker, if set, is written to a node's log before each start
	// ("=== StartMarker: starting node0 at TIME"), to tell runs apart.
	StartMarker string
	// OnExit, if set, is called when a node's process exits, with its
	// Wait error; expected is false when it exited by itself (not through
	// Kill, Terminate or Stop).
	OnExit func(n *Node, err error, expected bool)
}

// Node is one serve process.
type Node struct {
	ID, GRPC, Raft, HTTP string
	Dir, Log             string
	Args                 []string // after the binary; the same on every start

	cmd      *exec.Cmd
	done     chan struct{}
	expected bool // it is being killed or stopped
}

// Cluster is a set of serve processes that bootstrapped together.
type Cluster struct {
	Bin   string
	Dir   string
	Keep  bool // Stop leaves Dir
	Nodes []*Node
	cfg   Config
	mu    sync.Mutex
}

// New lays out a cluster (ports, directories, arguments) without starting
// it.
func New(cfg Config) (*Cluster, error) {
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	c := &Cluster{Bin: cfg.Bin, Dir: cfg.Dir, Keep: cfg.Keep, cfg: cfg}
	if c.Dir == "" {
		d, err := os.MkdirTemp("", cfg.TempPrefix)
		if err != nil {
			return nil, err
		}
		c.Dir = d
	}
	if cfg.LogDir != "" {
		if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
			return nil, err
		}
	}
	var peers []string
	for i := range cfg.Nodes {
		n := &Node{ID: NodeID(i)}
		n.Dir, n.Log = filepath.Join(c.Dir, n.ID), filepath.Join(c.Dir, n.ID+".log")
		if cfg.LogDir != "" {
			n.Log = filepath.Join(cfg.LogDir, n.ID+".log")
		}
		for j, a := range []*string{&n.GRPC, &n.Raft, &n.HTTP} {
			if cfg.BasePort != 0 {
				*a = fmt.Sprintf("%s:%d", cfg.Host, cfg.BasePort+10*i+j)
				continue
			}
			var err error
			if *a, err = FreeAddr(cfg.Host); err != nil {
				c.Stop()
				return nil, err
			}
		}
		c.Nodes = append(c.Nodes, n)
		peers = append(peers, n.ID+"="+n.Raft)
	}
	for i, n := range c.Nodes {
		n.Args = []string{"serve", "--id", n.ID, "--data-dir", n.Dir, "--grpc-addr", n.GRPC, "--raft-addr", n.Raft,
			"--http-addr", n.HTTP, "--bootstrap", strings.Join(peers, ",")}
		if cfg.Extra != nil {
			n.Args = append(n.Args, cfg.Extra(c, i)...)
		}
	}
	return c, nil
}

// NodeID is the id of node i: node0, node1, ...
func NodeID(i int) string { return fmt.Sprintf("node%d", i) }

// Start lays out a cluster, starts every node and waits up to wait for a
// leader. On an error it stops what it started.
func Start(ctx context.Context, cfg Config, wait time.Duration) (*Cluster, error) {
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := c.StartAll(); err != nil {
		c.Stop()
		return nil, err
	}
	if _, err := c.Leader(ctx, wait); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// StartAll starts every node.
func (c *Cluster) StartAll() error {
	for i := range c.Nodes {
		if err := c.Start(i); err != nil {
			return err
		}
	}
	return nil
}

// Start starts node i, for the first time or again on its data directory
// after it exited.
func (c *Cluster) Start(i int) error {
	n := c.Nodes[i]
	if c.Running(i) {
		return fmt.Errorf("%s is still running", n.ID)
	}
	f, err := os.OpenFile(n.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if c.cfg.StartMarker != "" {
		fmt.Fprintf(f, "=== %s: starting %s at %s\n", c.cfg.StartMarker, n.ID, time.Now().Format(time.RFC3339Nano))
	}
	cmd := exec.Command(c.Bin, n.Args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting %s: %w", n.ID, err)
	}
	done := make(chan struct{})
	c.mu.Lock()
	n.cmd, n.done, n.expected = cmd, done, false
	c.mu.Unlock()
	go func() {
		err := cmd.Wait()
		f.Close()
		c.mu.Lock()
		expected := n.expected
		c.mu.Unlock()
		close(done)
		if c.cfg.OnExit != nil {
			c.cfg.OnExit(n, err, expected)
		}
	}()
	return nil
}

// Running reports whether node i's process was started and has not exited.
func (c *Cluster) Running(i int) bool {
	c.mu.Lock()
	done := c.Nodes[i].done
	c.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Done is closed when node i's current process has exited (nil before
// its first start).
func (c *Cluster) Done(i int) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Nodes[i].done
}

// PID is node i's process id, 0 when it does not run.
func (c *Cluster) PID(i int) int {
	if !c.Running(i) {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Nodes[i].cmd.Process.Pid
}

// ProcessState is how node i's last process exited (nil while it runs).
func (c *Cluster) ProcessState(i int) *os.ProcessState {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Nodes[i].cmd == nil {
		return nil
	}
	return c.Nodes[i].cmd.ProcessState
}

// Signal sends s to node i. SIGKILL and SIGTERM mark its exit expected.
func (c *Cluster) Signal(i int, s syscall.Signal) error {
	n := c.Nodes[i]
	if !c.Running(i) {
		return fmt.Errorf("%s is not running", n.ID)
	}
	c.mu.Lock()
	if s == syscall.SIGKILL || s == syscall.SIGTERM {
		n.expected = true
	}
	p := n.cmd.Process
	c.mu.Unlock()
	return p.Signal(s)
}

// Pause stops node i with SIGSTOP: it neither answers nor refuses.
func (c *Cluster) Pause(i int) error { return c.Signal(i, syscall.SIGSTOP) }

// Resume continues a paused node i (SIGCONT).
func (c *Cluster) Resume(i int) error { return c.Signal(i, syscall.SIGCONT) }

// Kill SIGKILLs node i and waits until it is gone.
func (c *Cluster) Kill(i int) error {
	if err := c.Signal(i, syscall.SIGKILL); err != nil {
		return err
	}
	return c.wait(i, 10*time.Second)
}

// Terminate sends node i SIGTERM (after SIGCONT, should it be paused) and
// waits for it to exit, SIGKILLing it if it has not within 20s.
func (c *Cluster) Terminate(i int) error {
	if !c.Running(i) {
		return nil
	}
	_ = c.Signal(i, syscall.SIGCONT)
	_ = c.Signal(i, syscall.SIGTERM)
	return c.wait(i, 20*time.Second)
}

// wait waits up to d for node i to exit, then SIGKILLs it and waits.
func (c *Cluster) wait(i int, d time.Duration) error {
	done := c.Done(i)
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-time.After(d):
	}
	_ = c.Signal(i, syscall.SIGKILL)
	select {
	case <-done:
		return fmt.Errorf("%s did not exit within %s; killed", c.Nodes[i].ID, d)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s did not die of SIGKILL", c.Nodes[i].ID)
	}
}

// RestartAll sends sig (SIGTERM: a clean stop; SIGKILL: a crash) to every
// node at once, waits for all to be gone, and starts them again on their
// data.
func (c *Cluster) RestartAll(sig syscall.Signal) error {
	var errs []error
	for i := range c.Nodes {
		_ = c.Signal(i, syscall.SIGCONT)
		_ = c.Signal(i, sig)
	}
	for i := range c.Nodes {
		errs = append(errs, c.wait(i, 20*time.Second))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return c.StartAll()
}

// Stop stops every node (SIGTERM to all, then SIGKILL to any still there
// after 20s) and removes the cluster's directory unless Keep is set.
func (c *Cluster) Stop() {
	for i := range c.Nodes {
		if c.Running(i) {
			_ = c.Signal(i, syscall.SIGCONT)
			_ = c.Signal(i, syscall.SIGTERM)
		}
	}
	for i := range c.Nodes {
		_ = c.wait(i, 20*time.Second)
	}
	if !c.Keep {
		os.RemoveAll(c.Dir)
	}
}

// Addrs are the nodes' gRPC addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.GRPC
	}
	return out
}

// RunningHTTP are the HTTP addresses of the nodes that run.
func (c *Cluster) RunningHTTP() []string {
	var out []string
	for i, n := range c.Nodes {
		if c.Running(i) {
			out = append(out, n.HTTP)
		}
	}
	return out
}

// Leader waits up to d for a running node that reports itself leader and
// returns its index.
func (c *Cluster) Leader(ctx context.Context, d time.Duration) (int, error) {
	i, err := WaitLeader(ctx, d, c.Addrs(), c.cfg.Admin...)
	if err != nil {
		return -1, fmt.Errorf("%w; the nodes' logs are in %s", err, c.Dir)
	}
	return i, nil
}

// CaughtUp waits up to d until every node runs, one leads, and every
// node has applied the leader's commit index as it was when the wait began.
func (c *Cluster) CaughtUp(ctx context.Context, d time.Duration) error {
	if err := WaitCaughtUp(ctx, d, c.Addrs(), c.cfg.Admin...); err != nil {
		return fmt.Errorf("%w; the nodes' logs are in %s", err, c.Dir)
	}
	return nil
}

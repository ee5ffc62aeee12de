package proccluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lockcluster/lockcluster"
)

// Config describes a cluster to start.
type Config struct {
	Bin   string // the lockcluster binary the nodes run
	Nodes int
	// NodeBin, if set, returns the binary node i runs at first instead of
	// Bin ("": Bin); Node.Bin changes it for the next start (an upgrade).
	NodeBin func(i int) string
	// Dir holds node i's data in Dir/node<i> and its log (stdout and
	// stderr, appended across restarts) in Dir/node<i>.log ("": a new
	// temporary directory named TempPrefix*). Stop removes it unless Keep
	// is set.
	Dir        string
	TempPrefix string
	Keep       bool
	LogDir     string // where the logs go instead, if set
	// NodeDir, if set, is node i's data directory instead of Dir/node<i>
	// (a file system of its own, say); Stop leaves it.
	NodeDir func(i int) string
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
	// Bin is the binary the node runs from its next start on ("": the
	// cluster's): set it between a stop and a start to upgrade the node.
	Bin string

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
		if cfg.NodeDir != nil {
			n.Dir = cfg.NodeDir(i)
		}
		if cfg.NodeBin != nil {
			n.Bin = cfg.NodeBin(i)
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
	if err := c.Groups(ctx, wait); err != nil { // several groups: every one serves
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

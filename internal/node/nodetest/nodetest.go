// Package nodetest runs lockcluster nodes inside a test process, on
// loopback, with real gRPC and Raft: multi-node tests of the server, the
// client and the CLI use it.
//
// This package is implementation (test support), not API: it makes no
// compatibility promise, and it exports only what other lockcluster
// packages use. The stable API is the client (package lockcluster) and the
// wire contract (api/lockclusterv1).
package nodetest

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lockcluster/lockcluster/internal/node"
	"github.com/lockcluster/lockcluster/internal/proccluster"
	"github.com/lockcluster/lockcluster/internal/testutil"
	"github.com/lockcluster/lockcluster/raftnode"
)

// T is what a Cluster needs of its test: *testing.T and *testing.B have
// it, and so does Main, for TestMain and examples.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
	Log(args ...any)
	Cleanup(func())
	TempDir() string
}

var _ T = testing.TB(nil)

// Cluster is a set of in-process nodes.
type Cluster struct {
	t     T
	mu    sync.Mutex
	Nodes []*node.Node // nil where a node is stopped
	cfgs  []node.Config
	log   hclog.Logger
	// hashCheck: compare the nodes' applied hashes (hashcheck.go);
	// diverged: what differed so far.
	hashCheck  bool
	diverged   []string
	comparedAt int // the most nodes one comparison covered
}

// Options tune a test cluster.
type Options struct {
	// Quiet drops the nodes' logs instead of sending them to t.Log.
	Quiet bool
	// Node, if set, adjusts each node's configuration before it starts.
	Node func(*node.Config)
	// Groups, above 1, starts a cluster of that many Raft groups: every
	// node bootstraps with all of them (such a cluster takes no joins),
	// and Start returns once every node's replicas show the slots spread.
	// 0: GroupsEnv's value, else one group.
	Groups int
}

// GroupsEnv, when set to a number above 1, runs every test cluster that
// names no Groups with that many groups: the client's and the semantics'
// tests then run against a cluster of several groups (scripts/test).
const GroupsEnv = "LOCKCLUSTER_TEST_GROUPS"

// groupsOf is the number of groups a cluster of opts runs.
func groupsOf(opts Options) int {
	if opts.Groups != 0 {
		return opts.Groups
	}
	g, _ := strconv.Atoi(os.Getenv(GroupsEnv))
	return max(g, 1)
}

// Start starts n nodes: the first bootstraps the cluster, the others join
// it. It returns once every node sees the same leader.
func Start(t T, n int, opts Options) *Cluster {
	t.Helper()
	// The nodes log to t.Log until the writer's cleanup, registered before
	// the cluster's below and so run after it (cleanups run last first).
	out := io.Discard
	if !opts.Quiet {
		out = testutil.LogWriter(t)
	}
	c := &Cluster{t: t, log: hclog.New(&hclog.LoggerOptions{Name: "test", Output: out, Level: hclog.Info}), hashCheck: true}
	if os.Getenv(plantEnv) != "" {
		c.hashCheck = false
		t.Log("nodetest: " + plantEnv + " plants a divergence: the applied hashes are not compared")
	}
	t.Cleanup(func() {
		// Every multi-node test checks that its replicas never diverged:
		// compared before the nodes stop, failed after.
		if c.hashCheck {
			c.compareRunning(hashCatchUp)
		}
		c.StopAll()
		if problem := c.hashReport(); problem != "" {
			t.Fatalf("%s", problem)
		}
	})
	dir := t.TempDir()
	groups := groupsOf(opts)
	var peers []raftnode.Peer // every node's, with several groups
	if groups > 1 {
		for i := 0; i < n; i++ {
			addr, err := proccluster.FreeAddr("127.0.0.1")
			if err != nil {
				t.Fatalf("a raft port: %v", err)
			}
			peers = append(peers, raftnode.Peer{ID: fmt.Sprintf("node%d", i), Addr: addr})
		}
	}
	for i := 0; i < n; i++ {
		cfg := node.Config{
			ID: fmt.Sprintf("node%d", i), DataDir: fmt.Sprintf("%s/node%d", dir, i),
			GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
			Logger: c.log,
		}
		cfg.Server.SessionTick = 10 * time.Millisecond // the leader's deadline resolution
		if opts.Node != nil {
			opts.Node(&cfg)
		}
		switch {
		case groups > 1:
			cfg.Groups, cfg.RaftAddr, cfg.Bootstrap = groups, peers[i].Addr, peers
		case i == 0:
			cfg.Bootstrap = []raftnode.Peer{{ID: cfg.ID}}
		default:
			cfg.Join = c.Nodes[0].GRPCAddr()
		}
		nd, err := node.Start(cfg)
		if err != nil {
			t.Fatalf("starting node %d: %v", i, err)
		}
		// Restarts reuse the ports the node got.
		cfg.GRPCAddr, cfg.RaftAddr, cfg.HTTPAddr = nd.GRPCAddr(), nd.RaftAddr(), nd.HTTPAddr()
		cfg.Bootstrap, cfg.Join = nil, ""
		c.Nodes = append(c.Nodes, nd)
		c.cfgs = append(c.cfgs, cfg)
		if i == 0 && groups == 1 {
			c.WaitLeader(10 * time.Second)
		}
	}
	if groups > 1 {
		c.WaitFor(20*time.Second, "every node's replicas to show the slots spread over the groups", func() bool {
			for _, nd := range c.Nodes {
				if !nd.SpreadDone() {
					return false
				}
			}
			return true
		})
	}
	c.WaitFor(10*time.Second, "every node to be a voter with a directory record", func() bool {
		for _, nd := range c.Nodes {
			ms, err := nd.Raft().Members()
			if err != nil || len(ms) != n || len(nd.Machine().Members()) != n {
				return false
			}
		}
		return true
	})
	return c
}

// Addrs are the gRPC addresses of every node, running or not.
func (c *Cluster) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.cfgs))
	for i, cfg := range c.cfgs {
		out[i] = cfg.GRPCAddr
	}
	return out
}

// WaitFor polls cond until it holds, failing the cluster's test once d
// passes (testutil.Eventually).
func (c *Cluster) WaitFor(d time.Duration, what string, cond func() bool) {
	c.t.Helper()
	testutil.Eventually(c.t, d, what, cond)
}

// WaitLeader waits until the running nodes agree on a leader and returns
// its index.
func (c *Cluster) WaitLeader(d time.Duration) int {
	c.t.Helper()
	leader := -1
	c.WaitFor(d, "a leader", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		leader = -1
		var id string
		for i, nd := range c.Nodes {
			if nd == nil {
				continue
			}
			lid, _ := nd.Raft().Leader()
			if lid == "" || (id != "" && lid != id) {
				return false
			}
			id = lid
			if nd.Raft().IsLeader() {
				leader = i
			}
		}
		return leader >= 0
	})
	return leader
}

// Stop stops node i gracefully.
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	if c.hashCheck {
		c.compareRunning(0) // hashcheck.go: node i among them, for the last time
	}
	c.mu.Lock()
	nd := c.Nodes[i]
	c.Nodes[i] = nil
	c.mu.Unlock()
	if nd == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = nd.Close(ctx)
}

// Restart starts node i again from its data directory, on its old ports.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.mu.Lock()
	cfg := c.cfgs[i]
	c.mu.Unlock()
	var nd *node.Node
	var err error
	c.WaitFor(10*time.Second, "the node's ports to be free again", func() bool {
		nd, err = node.Start(cfg)
		return err == nil
	})
	c.mu.Lock()
	c.Nodes[i] = nd
	c.mu.Unlock()
}

// StopAll stops every running node.
func (c *Cluster) StopAll() {
	for i := range c.Nodes {
		c.Stop(i)
	}
}

// Main is a T for TestMain: Fatalf panics, Log drops, and Close runs the
// cleanups.
type Main struct {
	mu       sync.Mutex
	cleanups []func()
	dirs     []string
}

func (m *Main) Helper()                        {}
func (m *Main) Log(...any)                     {}
func (m *Main) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (m *Main) Cleanup(f func())               { m.mu.Lock(); m.cleanups = append(m.cleanups, f); m.mu.Unlock() }
func (m *Main) TempDir() string {
	d, err := os.MkdirTemp("", "lockcluster-test-")
	if err != nil {
		panic(err)
	}
	m.mu.Lock()
	m.dirs = append(m.dirs, d)
	m.mu.Unlock()
	return d
}

// Close runs the cleanups, last first, and removes the temporary dirs.
func (m *Main) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := len(m.cleanups) - 1; i >= 0; i-- {
		m.cleanups[i]()
	}
	for _, d := range m.dirs {
		os.RemoveAll(d)
	}
}

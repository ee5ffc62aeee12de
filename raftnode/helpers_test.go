package raftnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"go.uber.org/goleak"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

// TestMain checks that, once every test has shut its nodes down, no
// goroutine of raft, its transport or this package is left behind, but
// one: await's waiter on a future raft abandoned. raft leaves the futures
// still queued when it shuts down unanswered (wait.go); a checkpoint the
// leader queued just before a test's shutdown leaves that waiter behind by
// design, so that Shutdown itself never waits for it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/lockcluster/lockcluster/raftnode.(*Node).await.func1"))
}

// listFSM is the test state machine: the list of applied commands.
type listFSM struct {
	mu      sync.Mutex
	entries []string
}

func (f *listFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = append(f.entries, string(l.Data))
	return len(f.entries)
}

func (f *listFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return listSnapshot(slices.Clone(f.entries)), nil
}

func (f *listFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var entries []string
	if err := json.NewDecoder(rc).Decode(&entries); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = entries
	return nil
}

func (f *listFSM) Entries() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.entries)
}

type listSnapshot []string

func (s listSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode([]string(s)); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (listSnapshot) Release() {}

// testLogger sends hclog output to t.Log until the test's cleanups have
// run; call it before starting the nodes that log through it. Set
// RAFTNODE_TEST_LOG=debug for more detail.
func testLogger(t testing.TB, name string) hclog.Logger {
	level := hclog.Info
	if l := os.Getenv("RAFTNODE_TEST_LOG"); l != "" {
		level = hclog.LevelFromString(l)
	}
	return testutil.Logger(t, name, level)
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// testNode is one member of a test cluster; node is nil while stopped.
type testNode struct {
	id, dir, addr string
	fsm           *listFSM
	node          *Node
}

type cluster struct {
	t         *testing.T
	nodes     []*testNode
	configure func(*Config) // optional, applied by start
}

// newCluster starts n nodes on OS-chosen ports and bootstraps them as one
// cluster once their addresses are known.
func newCluster(t *testing.T, n int, configure ...func(*Config)) *cluster {
	t.Helper()
	c := &cluster{t: t}
	if len(configure) > 0 {
		c.configure = configure[0]
	}
	for i := range n {
		tn := &testNode{id: fmt.Sprintf("n%d", i+1), dir: t.TempDir()}
		c.nodes = append(c.nodes, tn)
		c.start(tn, nil)
	}
	peers := c.peers()
	for _, tn := range c.nodes {
		// A node bootstrapped first may win an election and replicate the
		// same configuration to a later one before that one's bootstrap:
		// raft then refuses it (ErrCantBootstrap), and the node is
		// already what the bootstrap would have made it.
		if err := tn.node.bootstrapCluster(peers); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			t.Fatalf("bootstrap %s: %v", tn.id, err)
		}
	}
	c.waitLeader()
	return c
}

func (c *cluster) peers() []Peer {
	var peers []Peer
	for _, tn := range c.nodes {
		peers = append(peers, Peer{ID: tn.id, Addr: tn.addr})
	}
	return peers
}

// start (re)starts tn from its data dir with a fresh FSM, on its previous
// address if it had one.
func (c *cluster) start(tn *testNode, bootstrap []Peer) {
	c.t.Helper()
	bind := tn.addr
	if bind == "" {
		bind = "127.0.0.1:0"
	}
	cfg := Config{
		ID: tn.id, DataDir: tn.dir, BindAddr: bind, Bootstrap: bootstrap,
		Logger: testLogger(c.t, tn.id),
	}
	if c.configure != nil {
		c.configure(&cfg)
	}
	tn.fsm = &listFSM{}
	var err error
	for range 50 { // the old port can be briefly taken by someone's outgoing connection
		tn.node, err = New(cfg, tn.fsm)
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		c.t.Fatalf("start %s: %v", tn.id, err)
	}
	tn.addr = tn.node.Addr()
	node := tn.node
	c.t.Cleanup(func() { // abrupt: no leadership transfer
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = node.Shutdown(ctx)
	})
}

// stop shuts tn down; graceful false skips the leadership transfer.
func (c *cluster) stop(tn *testNode, graceful bool) {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if !graceful {
		cancel()
	}
	defer cancel()
	if err := tn.node.Shutdown(ctx); err != nil {
		c.t.Fatalf("shutdown %s: %v", tn.id, err)
	}
	tn.node = nil
}

func (c *cluster) running() []*testNode {
	var out []*testNode
	for _, tn := range c.nodes {
		if tn.node != nil {
			out = append(out, tn)
		}
	}
	return out
}

// waitLeader waits until exactly one running node is leader and all
// running nodes name it.
func (c *cluster) waitLeader() *testNode {
	c.t.Helper()
	var leader *testNode
	testutil.Eventually(c.t, 10*time.Second, "a single agreed leader", func() bool {
		leader = nil
		for _, tn := range c.running() {
			if tn.node.IsLeader() {
				if leader != nil {
					return false
				}
				leader = tn
			}
		}
		if leader == nil {
			return false
		}
		for _, tn := range c.running() {
			if id, _ := tn.node.Leader(); id != leader.id {
				return false
			}
		}
		return true
	})
	return leader
}

func (c *cluster) followers(leader *testNode) []*testNode {
	var out []*testNode
	for _, tn := range c.running() {
		if tn != leader {
			out = append(out, tn)
		}
	}
	return out
}

// waitEntries waits until every given node's FSM holds exactly want.
func (c *cluster) waitEntries(want []string, nodes ...*testNode) {
	c.t.Helper()
	for _, tn := range nodes {
		testutil.Eventually(c.t, 5*time.Second, tn.id+" to apply "+fmt.Sprint(len(want))+" entries", func() bool {
			return slices.Equal(tn.fsm.Entries(), want)
		})
	}
}

// propose proposes each value on n and fails the test on any error.
func propose(t testing.TB, n *Node, values ...string) {
	t.Helper()
	for _, v := range values {
		if _, err := n.Propose(ctxTimeout(t, 5*time.Second), []byte(v)); err != nil {
			t.Fatalf("propose %q on %s: %v", v, n.ID(), err)
		}
	}
}

// soloNode starts a one-node cluster around fsm, shut down when the test
// ends (after the test's own later cleanups, which run first).
func soloNode(t *testing.T, fsm raft.FSM) *Node {
	t.Helper()
	n, err := New(Config{
		ID: "solo", DataDir: t.TempDir(), BindAddr: "127.0.0.1:0",
		Bootstrap: []Peer{{ID: "solo"}}, Logger: testLogger(t, "solo"),
	}, fsm)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown(context.Background()) })
	return n
}

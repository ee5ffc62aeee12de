package raftnode

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

// A data directory seeded from a state machine snapshot starts a one-node
// cluster with that state: the node elects itself, its new entries go on
// above the seeded index, its hash chain starts at an anchor, and a node
// that joins gets the state and verifies checkpoints without a fence.
func TestSeedStartsAClusterFromASnapshot(t *testing.T) {
	t.Parallel()
	const index = 1000
	state := []string{"a", "b", "c"}
	data, _ := json.Marshal(state) // what listFSM.Restore reads
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := &cluster{t: t, configure: func(cfg *Config) { cfg.CheckpointInterval = 50 * time.Millisecond }}
	n1 := &testNode{id: "n1", dir: t.TempDir(), addr: addr}
	if err := SeedDataDir(Seed{DataDir: n1.dir, ID: n1.id, Addr: addr, Index: index, Data: bytes.NewReader(data), Logger: testLogger(t, "seed")}); err != nil {
		t.Fatal(err)
	}
	c.nodes = append(c.nodes, n1)
	c.start(n1, nil)
	leader := c.waitLeader()
	c.waitEntries(state, n1)
	r, err := n1.node.Propose(ctxTimeout(t, 5*time.Second), []byte("d"))
	if err != nil || r.Index <= index {
		t.Fatalf("the first proposal: index %d, %v; want above the seeded %d", r.Index, err, index)
	}
	testutil.Eventually(t, 5*time.Second, "the chain to start at an anchor", func() bool {
		_, _, known := n1.node.AppliedHash()
		return known
	})

	n2 := &testNode{id: "n2", dir: t.TempDir()}
	c.start(n2, nil)
	if err := leader.node.Join(ctxTimeout(t, 5*time.Second), n2.id, n2.addr); err != nil {
		t.Fatal(err)
	}
	c.nodes = append(c.nodes, n2)
	propose(t, n1.node, "e")
	want := append(slices.Clone(state), "d", "e")
	c.waitEntries(want, n1, n2)
	testutil.Eventually(t, 10*time.Second, "the joined node to verify a checkpoint", func() bool {
		return n2.node.CheckpointsVerified() > 0
	})
	for _, tn := range c.nodes {
		if err := tn.node.Diverged(); err != nil {
			t.Fatalf("%s: %v", tn.id, err)
		}
	}
}

// A seed never overwrites: a directory with anything in it is refused.
func TestSeedRefusesADirectoryInUse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "raft.db"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := SeedDataDir(Seed{DataDir: dir, ID: "n1", Addr: "127.0.0.1:1", Index: 5, Data: strings.NewReader("[]")})
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("seeding a used directory: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "raft.db")); string(b) != "x" {
		t.Fatal("the directory was changed")
	}
	if err := SeedDataDir(Seed{DataDir: t.TempDir(), ID: "n1", Addr: "127.0.0.1:1", Data: strings.NewReader("[]")}); err == nil {
		t.Fatal("a seed at index 0 was accepted")
	}
}

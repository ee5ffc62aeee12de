package raftnode

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

func cmd(i, term uint64, data string) *raft.Log {
	return &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: []byte(data)}
}

// The chain separates histories that differ in any of index, term, type or
// data, and never re-converges after they differ.
func TestChainSeparatesHistories(t *testing.T) {
	run := func(logs ...*raft.Log) chain {
		c := chain{}
		c.reset(&raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Extensions: checkpoint{anchor: true}.encode()})
		for _, l := range logs {
			c.fold(l)
		}
		return c
	}
	base := run(cmd(2, 1, "a"), cmd(3, 1, "b"))
	for name, other := range map[string]chain{
		"data":  run(cmd(2, 1, "a"), cmd(3, 1, "x")),
		"term":  run(cmd(2, 1, "a"), cmd(3, 2, "b")),
		"index": run(cmd(2, 1, "a"), cmd(4, 1, "b")),
		"type":  run(cmd(2, 1, "a"), &raft.Log{Index: 3, Term: 1, Type: raft.LogConfiguration, Data: []byte("b")}),
		"split": run(cmd(2, 1, "ab"), cmd(3, 1, "")),
	} {
		if other.hash == base.hash {
			t.Errorf("%s: different histories have the same hash", name)
		}
	}
	if again := run(cmd(2, 1, "a"), cmd(3, 1, "b")); again.hash != base.hash {
		t.Error("the same history hashed twice differs")
	}
	// Once different, always different: the same suffix does not heal it.
	x, y := run(cmd(2, 1, "a")), run(cmd(2, 1, "z"))
	for i := uint64(3); i < 10; i++ {
		x.fold(cmd(i, 1, "same"))
		y.fold(cmd(i, 1, "same"))
	}
	if x.hash == y.hash {
		t.Error("histories re-converged")
	}
}

func TestChainAt(t *testing.T) {
	c := chain{}
	if _, ok, why := c.at(0); ok || why == "" {
		t.Fatalf("an unknown chain answered at(0): ok=%v why=%q", ok, why)
	}
	c.reset(&raft.Log{Index: 10, Term: 1, Type: raft.LogCommand, Extensions: checkpoint{anchor: true}.encode()})
	values := map[uint64][32]byte{10: c.hash}
	for _, i := range []uint64{12, 13, 20} { // 11 and 14..19: no-ops, not seen
		c.fold(cmd(i, 1, fmt.Sprint(i)))
		values[i] = c.hash
	}
	for i, want := range map[uint64]uint64{10: 10, 11: 10, 12: 12, 13: 13, 15: 13, 19: 13, 20: 20} {
		if h, ok, why := c.at(i); !ok || h != values[want] {
			t.Errorf("at(%d): ok=%v (%s), want the value after %d", i, ok, why, want)
		}
	}
	for _, i := range []uint64{9, 21} {
		if _, ok, _ := c.at(i); ok {
			t.Errorf("at(%d) answered outside the chain [10, 20]", i)
		}
	}
	// The ring forgets the oldest values.
	for i := uint64(21); i < 21+hashRingSize; i++ {
		c.fold(cmd(i, 1, ""))
	}
	if _, ok, _ := c.at(20); ok {
		t.Error("at(20) answered after the ring wrapped past it")
	}
	if _, ok, why := c.at(21 + hashRingSize - 1); !ok {
		t.Errorf("at(last): %s", why)
	}
}

// A snapshot carries the chain; a snapshot written before chains existed
// restores with the chain unknown, and the state machine gets its bytes
// intact either way.
func TestSnapshotCarriesChain(t *testing.T) {
	c := chain{}
	c.reset(&raft.Log{Index: 3, Term: 1, Type: raft.LogCommand, Extensions: checkpoint{anchor: true}.encode()})
	c.fold(cmd(4, 1, "x"))

	got, rest, ok, err := readChainHeader(io.MultiReader(bytes.NewReader(c.header()), bytes.NewReader([]byte("state"))))
	if err != nil || !ok {
		t.Fatalf("readChainHeader: ok=%v err=%v", ok, err)
	}
	if !got.known || got.anchor != 3 || got.index != 4 || got.hash != c.hash {
		t.Errorf("restored chain %+v, want known, anchor 3, index 4, the writer's hash", got)
	}
	if h, ok, _ := got.at(4); !ok || h != c.hash {
		t.Error("the restored chain does not answer at its own index")
	}
	if b, _ := io.ReadAll(rest); string(b) != "state" {
		t.Errorf("the state machine got %q", b)
	}

	legacy := []byte(`["an old snapshot"]`)
	_, rest, ok, err = readChainHeader(bytes.NewReader(legacy))
	if err != nil || ok {
		t.Fatalf("an old snapshot: ok=%v err=%v", ok, err)
	}
	if b, _ := io.ReadAll(rest); !bytes.Equal(b, legacy) {
		t.Errorf("the state machine got %q of an old snapshot", b)
	}
}

// sameHashes waits until every running node knows its chain and has
// applied at least index, then checks that they agree at index.
func sameHashes(t *testing.T, c *cluster, index uint64) {
	t.Helper()
	var first [32]byte
	for i, tn := range c.running() {
		testutil.Eventually(t, 10*time.Second, tn.id+" to apply "+fmt.Sprint(index), func() bool {
			applied, _, known := tn.node.AppliedHash()
			return known && applied >= index
		})
		h, ok, why := tn.node.HashAt(index)
		if !ok {
			t.Fatalf("%s: no hash at %d: %s", tn.id, index, why)
		}
		if i == 0 {
			first = h
		} else if h != first {
			t.Fatalf("%s's hash at %d differs from %s's", tn.id, index, c.running()[0].id)
		}
	}
}

// In a cluster, every node starts its chain at the first leader's anchor,
// the chains agree, checkpoints verify, and a node restarted from its own
// snapshot continues its chain.
func TestClusterChainsAgree(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.CheckpointInterval = 50 * time.Millisecond
		cfg.snapshotThreshold = 8
		cfg.trailingLogs = 2
	})
	leader := c.waitLeader()
	// The chain starts at the leader's anchor entry: entries proposed
	// before it is applied are not in any chain.
	testutil.Eventually(t, 10*time.Second, "the anchor", func() bool {
		_, _, known := leader.node.AppliedHash()
		return known
	})
	for i := range 20 {
		propose(t, leader.node, fmt.Sprint("e", i))
	}
	sameHashes(t, c, leader.node.LastIndex())

	follower := c.followers(leader)[0]
	testutil.Eventually(t, 10*time.Second, "a verified checkpoint on "+follower.id, func() bool {
		return follower.node.checkpointsOK.Load() > 0
	})
	if _, err := follower.node.Snapshot(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	c.stop(follower, true)
	propose(t, leader.node, "while-down")
	c.start(follower, nil)
	propose(t, leader.node, "after")
	sameHashes(t, c, leader.node.LastIndex())
	if err := follower.node.Diverged(); err != nil {
		t.Fatalf("restarted follower: %v", err)
	}
}

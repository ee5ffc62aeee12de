package raftnode

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

// countingLayer is a plain TCP raft.StreamLayer that counts its dials.
type countingLayer struct {
	net.Listener
	dials *atomic.Int64
}

func (l countingLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	l.dials.Add(1)
	return net.DialTimeout("tcp", string(addr), timeout)
}

// countingProvider resolves server IDs through a map, counting lookups.
// Until an ID is in the map, raft falls back to the configured address.
type countingProvider struct {
	addrs   *sync.Map // server ID -> address
	lookups *atomic.Int64
}

func (p countingProvider) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	p.lookups.Add(1)
	if a, ok := p.addrs.Load(string(id)); ok {
		return raft.ServerAddress(a.(string)), nil
	}
	return "", errors.New("unknown server " + string(id))
}

// Config.StreamLayer and Config.AddressProvider are wired into the
// transport.
func TestStreamLayerAndAddressProvider(t *testing.T) {
	t.Parallel()
	var dials, lookups atomic.Int64
	var addrs sync.Map
	c := newCluster(t, 3, func(cfg *Config) {
		l, err := net.Listen("tcp", cfg.BindAddr)
		if err != nil {
			t.Fatalf("listen: %v", err)
		}
		cfg.StreamLayer = countingLayer{Listener: l, dials: &dials}
		cfg.AddressProvider = countingProvider{addrs: &addrs, lookups: &lookups}
		cfg.BindAddr = ""
	})
	for _, tn := range c.nodes {
		addrs.Store(tn.id, tn.addr)
	}
	leader := c.waitLeader()
	propose(t, leader.node, "a")
	c.waitEntries([]string{"a"}, c.nodes...)
	if dials.Load() == 0 || lookups.Load() == 0 {
		t.Fatalf("dials=%d lookups=%d, want both > 0", dials.Load(), lookups.Load())
	}
}

// gatedFSM holds the FSM goroutine inside Apply of "slow" until gate is
// closed; entered is closed when it gets there.
type gatedFSM struct {
	*listFSM
	entered, gate chan struct{}
}

func (f gatedFSM) Apply(l *raft.Log) any {
	if string(l.Data) == "slow" {
		close(f.entered)
		<-f.gate
	}
	return f.listFSM.Apply(l)
}

// ReadBarrier waits for the FSM itself, not for raft's AppliedIndex, which
// advances as soon as entries are handed to the FSM goroutine.
func TestReadBarrierWaitsForFSM(t *testing.T) {
	t.Parallel()
	fsm := gatedFSM{listFSM: &listFSM{}, entered: make(chan struct{}), gate: make(chan struct{})}
	n := soloNode(t, fsm)
	var open sync.Once
	release := func() { open.Do(func() { close(fsm.gate) }) }
	t.Cleanup(release) // runs before Shutdown, which waits for the FSM goroutine
	testutil.Eventually(t, 10*time.Second, "leadership", n.IsLeader)
	propose(t, n, "a")

	done := make(chan error, 1)
	go func() {
		_, err := n.Propose(ctxTimeout(t, 10*time.Second), []byte("slow"))
		done <- err
	}()
	select { // "slow" is committed and the FSM goroutine is stuck applying it
	case <-fsm.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the FSM never started applying the slow entry")
	}
	// raft's AppliedIndex already counts "slow"; the FSM has not applied it.
	testutil.Eventually(t, 5*time.Second, "raft.AppliedIndex to pass the FSM's index", func() bool {
		return n.raft.AppliedIndex() > n.AppliedIndex()
	})
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := n.ReadBarrier(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ReadBarrier while the FSM is stuck: %v, want a deadline error", err)
	}
	release()
	if err := n.ReadBarrier(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("ReadBarrier: %v", err)
	}
	if got := fsm.Entries(); !slices.Equal(got, []string{"a", "slow"}) {
		t.Fatalf("FSM after ReadBarrier = %q", got)
	}
	if err := <-done; err != nil {
		t.Fatalf("slow Propose: %v", err)
	}
}

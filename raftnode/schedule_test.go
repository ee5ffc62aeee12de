package raftnode

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// This file drives three real hashicorp/raft instances through one exact
// schedule, on raft's in-memory transport, inside a synctest bubble: time
// is virtual and moves only when every goroutine waits, so a sleep of the
// test goroutine is a precise step of the schedule, not a guess.
//
// The schedule makes a deposed leader with an uncommitted tail meet the
// new leader's first request of the shape prev=k, no entries, commit=k+1:
//
//  1. A leads; entries up to k are committed and applied everywhere.
//  2. A is cut off and accepts two more writes: its tail k+1, k+2.
//  3. B and C elect a new leader, say B. B's no-op is held in B's log
//     store, so B's last index stays k.
//  4. B's replication to A fails until raft's backoff between retries is
//     10.24 s (replication.go, replicateTo: the backoff comes after the
//     caller read the last index, before setupAppendEntries reads the
//     commit index).
//  5. While B's replicator to A sleeps with last index k, B's no-op is
//     released and committed through C: commit index k+1.
//  6. A is reconnected. The replicator wakes and sends prev=k, no
//     entries, commit=k+1.
//
// Without the clamp, A applies its own stale k+1 (raft.go, appendEntries:
// min(LeaderCommitIndex, getLastIndex())). With it, every node applies the
// same (index, term, data) sequence.

// link is a sender-side transport that can cut a node off from its peers.
type link struct {
	raft.Transport
	from string
	net  *schedNet
}

func (l *link) check(to raft.ServerID, rpc string) error {
	if l.net.isCut(l.from, string(to)) {
		l.net.failed(l.from, string(to), rpc)
		return fmt.Errorf("link %s->%s is cut", l.from, to)
	}
	return nil
}

func (l *link) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	kind := "AppendEntries"
	if args.PrevLogEntry == 0 && args.LeaderCommitIndex == 0 && len(args.Entries) == 0 {
		kind = "Heartbeat" // raft's heartbeat goroutine, with a backoff of its own
	}
	if err := l.check(id, kind); err != nil {
		return err
	}
	return l.Transport.AppendEntries(id, target, args, resp)
}

// AppendEntriesPipeline: no pipelining, as in production (maxRPCsInFlight 1).
func (l *link) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

func (l *link) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if err := l.check(id, "RequestVote"); err != nil {
		return err
	}
	return l.Transport.RequestVote(id, target, args, resp)
}

func (l *link) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if err := l.check(id, "RequestPreVote"); err != nil {
		return err
	}
	return l.Transport.(raft.WithPreVote).RequestPreVote(id, target, args, resp)
}

func (l *link) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	if err := l.check(id, "InstallSnapshot"); err != nil {
		return err
	}
	return l.Transport.InstallSnapshot(id, target, args, resp, data)
}

func (l *link) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	if err := l.check(id, "TimeoutNow"); err != nil {
		return err
	}
	return l.Transport.TimeoutNow(id, target, args, resp)
}

func (l *link) Close() error { return l.Transport.(raft.WithClose).Close() }

// schedNet is the state of the links and the counts of failed RPCs.
type schedNet struct {
	mu       sync.Mutex
	cut      map[string]bool // node cut off from everyone
	failures map[string]int  // "from->to AppendEntries" -> count
}

func (n *schedNet) isCut(from, to string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cut[from] || n.cut[to]
}

func (n *schedNet) setCut(node string, cut bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut[node] = cut
}

func (n *schedNet) failed(from, to, rpc string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.failures[from+"->"+to+" "+rpc]++
}

func (n *schedNet) failuresOf(from, to, rpc string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.failures[from+"->"+to+" "+rpc]
}

// holdNoop holds the first no-op any node stores once armed: the new
// leader's (a leader stores its no-op before it replicates it).
type holdNoop struct {
	mu      sync.Mutex
	armed   bool
	holder  string        // who is held
	release chan struct{} // closed to let it go
	once    sync.Once
}

func (h *holdNoop) let() { h.once.Do(func() { close(h.release) }) }

type holdingLogs struct {
	raft.LogStore
	id   string
	hold *holdNoop
}

func (s holdingLogs) StoreLogs(logs []*raft.Log) error {
	h := s.hold
	h.mu.Lock()
	held := h.armed && h.holder == "" && slices.ContainsFunc(logs, func(l *raft.Log) bool { return l.Type == raft.LogNoop })
	if held {
		h.holder = s.id
	}
	h.mu.Unlock()
	if held {
		<-h.release
	}
	return s.LogStore.StoreLogs(logs)
}

func (s holdingLogs) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (h *holdNoop) heldBy() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.holder
}

type schedNode struct {
	id    string
	raft  *raft.Raft
	fsm   *historyFSM
	clamp *clampTransport
}

func (n *schedNode) commitIndex() uint64 {
	c, _ := strconv.ParseUint(n.raft.Stats()["commit_index"], 10, 64)
	return c
}

// runSchedule runs the schedule above and returns the deposed leader's id
// and every node's history.
func runSchedule(t *testing.T) (deposed string, histories map[string][]applied) {
	net := &schedNet{cut: map[string]bool{}, failures: map[string]int{}}
	hold := &holdNoop{release: make(chan struct{})}
	ids := []string{"a", "b", "c"}
	inmem := map[string]*raft.InmemTransport{}
	var conf raft.Configuration
	for _, id := range ids {
		addr, tr := raft.NewInmemTransport(raft.ServerAddress(id))
		inmem[id] = tr
		conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(id), Address: addr, Suffrage: raft.Voter})
	}
	for _, a := range ids {
		for _, b := range ids {
			if a != b {
				inmem[a].Connect(raft.ServerAddress(b), inmem[b])
			}
		}
	}
	nodes := map[string]*schedNode{}
	for _, id := range ids {
		cfg := Config{ID: id}.withDefaults().raftConfig(nil)
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: id, Level: hclog.Error, Output: io.Discard})
		store := raft.NewInmemStore()
		logs := holdingLogs{LogStore: store, id: id, hold: hold}
		snaps := raft.NewInmemSnapshotStore()
		trans := newClampTransport(&link{Transport: inmem[id], from: id, net: net}, nil)
		if err := raft.BootstrapCluster(cfg, logs, store, snaps, trans, conf); err != nil {
			t.Fatal(err)
		}
		fsm := &historyFSM{}
		r, err := raft.NewRaft(cfg, fsm, logs, store, snaps, trans)
		if err != nil {
			t.Fatal(err)
		}
		nodes[id] = &schedNode{id: id, raft: r, fsm: fsm, clamp: trans}
	}
	defer func() {
		hold.let()
		for _, n := range nodes {
			n.raft.Shutdown().Error()
		}
	}()

	// step advances virtual time until cond holds (or a minute passes).
	step := func(what string, cond func() bool) {
		t.Helper()
		for i := 0; !cond(); i++ {
			if i == 6000 {
				for _, n := range nodes {
					t.Logf("%s: %s last=%d commit=%d applied %v", n.id, n.raft.State(), n.raft.LastIndex(), n.commitIndex(), n.fsm.History())
				}
				t.Fatalf("schedule stuck: %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	leader := func(except string) *schedNode {
		for _, id := range ids {
			if id != except && nodes[id].raft.State() == raft.Leader {
				return nodes[id]
			}
		}
		return nil
	}
	appliedAll := func(data string, on ...*schedNode) bool {
		if on == nil {
			on = slices.Collect(maps.Values(nodes))
		}
		for _, n := range on {
			h := n.fsm.History()
			if len(h) == 0 || h[len(h)-1].Data != data {
				return false
			}
		}
		return true
	}

	// 1. A leads; c1..c3 are committed and applied everywhere.
	step("a first leader", func() bool { return leader("") != nil })
	a := leader("")
	for i := 1; i <= 3; i++ {
		if err := a.raft.Apply([]byte("c"+strconv.Itoa(i)), 0).Error(); err != nil {
			t.Fatal(err)
		}
	}
	step("c3 applied everywhere", func() bool { return appliedAll("c3") })
	k := a.raft.LastIndex()

	// 2. A is cut off and takes two writes it can never commit.
	hold.mu.Lock()
	hold.armed = true
	hold.mu.Unlock()
	net.setCut(a.id, true)
	a.raft.Apply([]byte("stale1"), 0)
	a.raft.Apply([]byte("stale2"), 0)
	step("A's stale tail stored", func() bool { return a.raft.LastIndex() == k+2 })

	// 3. A new leader, its no-op held.
	step("a new leader holding its no-op", func() bool { return hold.heldBy() != "" })
	b := nodes[hold.heldBy()]
	var c *schedNode
	for _, id := range ids {
		if id != a.id && id != b.id {
			c = nodes[id]
		}
	}
	if b.raft.LastIndex() != k {
		t.Fatalf("new leader %s has last index %d, want %d", b.id, b.raft.LastIndex(), k)
	}

	// 4. B's replication to A fails until the next backoff is 10.24 s.
	step("B's replication to A backing off", func() bool {
		return net.failuresOf(b.id, a.id, "AppendEntries") >= 12
	})
	failed := net.failuresOf(b.id, a.id, "AppendEntries")
	time.Sleep(time.Second) // the replicator woke (commitTimeout <= 100ms), read last index k, sleeps 10.24 s
	if got := net.failuresOf(b.id, a.id, "AppendEntries"); got != failed {
		t.Fatalf("B's replicator to A tried again (%d failures, was %d): the schedule lost its window", got, failed)
	}

	// 5. The no-op is stored and committed through C.
	hold.let()
	step("B's no-op committed", func() bool { return b.commitIndex() >= k+1 })
	if got := net.failuresOf(b.id, a.id, "AppendEntries"); got != failed {
		t.Fatalf("B's replicator to A tried again before A was back: the schedule lost its window")
	}

	// 6. A is back; B's replicator sends prev=k, no entries, commit=k+1.
	net.setCut(a.id, false)
	// Wait until B and C applied d1 and A committed past it (without the
	// clamp A never applies d1: it applied its stale entries at those
	// indexes instead).
	d1 := b.raft.Apply([]byte("d1"), 0)
	step("d1 committed", func() bool { return d1.Error() == nil })
	step("d1 applied on B and C, committed on A", func() bool {
		return appliedAll("d1", b, c) && a.commitIndex() >= d1.Index() && a.raft.AppliedIndex() >= d1.Index()
	})
	if c.commitIndex() < k+1 {
		t.Fatalf("C's commit index %d: it never took B's no-op", c.commitIndex())
	}

	histories = map[string][]applied{}
	for id, n := range nodes {
		histories[id] = n.fsm.History()
	}
	return a.id, histories
}

// Every node applies the same (index, term, data) sequence, even when the
// deposed leader meets the new leader's first request of the dangerous
// shape.
func TestScheduleDeposedLeaderStaysConsistent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, h := runSchedule(t)
		var want []applied
		for id, got := range h {
			if want == nil {
				want = got
				continue
			}
			if !slices.Equal(got, want) {
				t.Errorf("node %s applied %v; another node applied %v", id, got, want)
			}
		}
	})
}

// The same schedule with the clamp switched off: the deposed leader
// applies its own stale entry. This shows the schedule reaches the bug (it
// is how the test above was checked to fail without the clamp); if raft
// is upgraded and this fails, the library fixed its commit rule.
func TestScheduleHashicorpRaftAloneDiverges(t *testing.T) {
	withoutWorkarounds(t)
	synctest.Test(t, func(t *testing.T) {
		a, h := runSchedule(t)
		if !slices.ContainsFunc(h[a], func(e applied) bool { return e.Data == "stale1" }) {
			t.Fatalf("expected raft v1.7.3 alone to apply the deposed leader's stale entry; it applied %v", h[a])
		}
		for id, got := range h {
			if id != a && slices.ContainsFunc(got, func(e applied) bool { return e.Data == "stale1" }) {
				t.Fatalf("node %s applied the stale entry too: %v", id, got)
			}
		}
	})
}

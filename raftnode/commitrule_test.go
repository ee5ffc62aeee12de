package raftnode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

// applied is one entry as a state machine saw it.
type applied struct {
	Index, Term uint64
	Data        string
}

func (a applied) String() string { return fmt.Sprintf("%d/t%d/%s", a.Index, a.Term, a.Data) }

// historyFSM records every command it applies with its index and term: two
// replicas agree only if their histories are equal, entry by entry.
type historyFSM struct {
	mu      sync.Mutex
	history []applied
}

func (f *historyFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.history = append(f.history, applied{l.Index, l.Term, string(l.Data)})
	return nil
}

func (f *historyFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := json.Marshal(f.history)
	return rawSnapshot(b), err
}

func (f *historyFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var h []applied
	if err := json.NewDecoder(rc).Decode(&h); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.history = h
	return nil
}

func (f *historyFSM) History() []applied {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.history)
}

type rawSnapshot []byte

func (s rawSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (rawSnapshot) Release() {}

// staleFollower is a node whose log holds entries 1..k of term 1 (a
// configuration, then commands) and a tail k+1..k+n of term 2 that was
// never committed: a deposed leader's, or a follower's that took entries
// from one. fake is a newer leader (term 3) that talks to it through a real
// NetworkTransport.
type staleFollower struct {
	t     *testing.T
	node  *Node
	fsm   *historyFSM
	fake  *raft.NetworkTransport
	k, n  uint64
	conf  raft.Configuration
	votes chan any // vote requests the fake leader received
}

const fakeLeaderTerm = 3

func newStaleFollower(t *testing.T, k, n uint64, configure ...func(*Config)) *staleFollower {
	t.Helper()
	dir := t.TempDir()
	fake, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatalf("fake leader transport: %v", err)
	}
	votes := make(chan any, 16)
	done := make(chan struct{})
	t.Cleanup(func() {
		close(done)
		fake.CloseStreams()
		fake.Close()
	})
	go func() { // the fake leader refuses every vote: it has a leader (itself)
		for {
			select {
			case rpc := <-fake.Consumer():
				select {
				case votes <- rpc.Command:
				default:
				}
				rpc.Respond(nil, fmt.Errorf("fake leader: not voting"))
			case <-done:
				return
			}
		}
	}()
	conf := raft.Configuration{Servers: []raft.Server{
		{ID: "f", Address: "127.0.0.1:1", Suffrage: raft.Voter}, // its own address is not dialled
		{ID: "L", Address: fake.LocalAddr(), Suffrage: raft.Voter},
		{ID: "p", Address: "127.0.0.1:2", Suffrage: raft.Voter}, // down
	}}
	store, err := raftboltdb.NewBoltStore(filepath.Join(dir, "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	logs := []*raft.Log{{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(conf)}}
	for i := uint64(2); i <= k; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte("c" + strconv.FormatUint(i, 10))})
	}
	for i := k + 1; i <= k+n; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 2, Type: raft.LogCommand, Data: []byte("stale" + strconv.FormatUint(i, 10))})
	}
	if err := store.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := store.SetUint64([]byte("CurrentTerm"), 2); err != nil {
		t.Fatal(err)
	}
	store.Close()

	f := &historyFSM{}
	cfg := Config{
		ID: "f", DataDir: dir, BindAddr: "127.0.0.1:0", Logger: testLogger(t, "f"),
		// It must not stand for election during the test: only the fake
		// leader moves it.
		HeartbeatTimeout: time.Hour, ElectionTimeout: time.Hour,
	}
	for _, c := range configure {
		c(&cfg)
	}
	node, err := New(cfg, f)
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	t.Cleanup(func() { node.Shutdown(ctxTimeout(t, 10*time.Second)) })
	return &staleFollower{t: t, node: node, fsm: f, fake: fake, k: k, n: n, conf: conf, votes: votes}
}

// appendEntries sends one AppendEntries from the fake leader and returns
// whether the node accepted it.
func (s *staleFollower) appendEntries(prev, prevTerm, commit uint64, entries ...*raft.Log) bool {
	s.t.Helper()
	req := &raft.AppendEntriesRequest{
		RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("L"), Addr: []byte(s.fake.LocalAddr())},
		Term:              fakeLeaderTerm,
		PrevLogEntry:      prev,
		PrevLogTerm:       prevTerm,
		Entries:           entries,
		LeaderCommitIndex: commit,
	}
	var resp raft.AppendEntriesResponse
	if err := s.fake.AppendEntries("f", raft.ServerAddress(s.node.Addr()), req, &resp); err != nil {
		s.t.Fatalf("AppendEntries: %v", err)
	}
	return resp.Success
}

// settled waits until the state machine has applied everything the node
// considers committed, and returns the commit index. raft sets the commit
// index before it answers AppendEntries, so once the answer is in, this is
// all the request will ever make the node apply.
func (s *staleFollower) settled() uint64 {
	s.t.Helper()
	commit, _ := strconv.ParseUint(s.node.raft.Stats()["commit_index"], 10, 64)
	testutil.Eventually(s.t, 10*time.Second, fmt.Sprintf("applied index %d", commit), func() bool {
		return s.node.AppliedIndex() >= commit
	})
	return commit
}

func commands(from, to uint64, term uint64, prefix string) []applied {
	var out []applied
	for i := from; i <= to; i++ {
		out = append(out, applied{i, term, prefix + strconv.FormatUint(i, 10)})
	}
	return out
}

// withoutWorkarounds runs f with the library workarounds switched off, to
// show what hashicorp/raft does by itself.
func withoutWorkarounds(t *testing.T) {
	saved := workarounds
	workarounds.clampCommit, workarounds.monotonicLogs = false, false
	t.Cleanup(func() { workarounds = saved })
}

// The follower commit rule (DESIGN.md): a request from a newer-term leader
// with PrevLogEntry = k, no entries and LeaderCommitIndex = k+2 proves only
// that the node's log matches the leader's up to k. The node must apply
// nothing past k — its entries k+1.. are a stale tail of term 2 — until an
// entry of the new term arrives.
func TestStaleTailIsNotCommittedByAnEmptyAppend(t *testing.T) {
	const k, n = 5, 3
	t.Run("raftnode", func(t *testing.T) {
		s := newStaleFollower(t, k, n)
		if !s.appendEntries(k, 1, k+2) {
			t.Fatal("the node refused an AppendEntries whose previous entry matches")
		}
		if c := s.settled(); c != k {
			t.Errorf("commit index %d after a request proving only %d", c, k)
		}
		want := commands(2, k, 1, "c")
		if got := s.fsm.History(); !slices.Equal(got, want) {
			t.Fatalf("applied %v, want %v (nothing of the stale tail)", got, want)
		}
		if s.node.clamp.clamped.Load() == 0 {
			t.Error("the clamp did not count the request it lowered")
		}

		// The new leader's first entry replaces the stale tail.
		if !s.appendEntries(k, 1, k+1, &raft.Log{Index: k + 1, Term: fakeLeaderTerm, Type: raft.LogCommand, Data: []byte("new6")}) {
			t.Fatal("the node refused the new leader's first entry")
		}
		s.settled()
		want = append(want, applied{k + 1, fakeLeaderTerm, "new6"})
		if got := s.fsm.History(); !slices.Equal(got, want) {
			t.Fatalf("applied %v, want %v", got, want)
		}
		if last := s.node.LastIndex(); last != k+1 {
			t.Errorf("last index %d, want %d: the stale tail should be gone", last, k+1)
		}
	})

	// What the test above guards against, shown on the library alone: if
	// this subtest ever fails, hashicorp/raft stopped applying a stale tail
	// (an upgrade fixed it), and the clamp can be reconsidered. This is also
	// how the test above was checked to fail without the clamp.
	t.Run("hashicorp-raft-alone", func(t *testing.T) {
		withoutWorkarounds(t)
		s := newStaleFollower(t, k, n)
		s.appendEntries(k, 1, k+2)
		s.settled()
		want := append(commands(2, k, 1, "c"), commands(k+1, k+2, 2, "stale")...)
		if got := s.fsm.History(); !slices.Equal(got, want) {
			t.Fatalf("applied %v; expected raft v1.7.3 to apply the stale entries: %v", got, want)
		}
	})
}

// A snapshot installed over a log with stale entries leaves none of them
// below the snapshot (the log store is monotonic, so raft removes old
// logs); otherwise a node that later leads could send them as history.
func TestInstallSnapshotRemovesStaleEntries(t *testing.T) {
	const k, n, snapIndex = 5, 3, 20
	// On the bolt log, which raftnode declares monotonic; raft-wal is
	// monotonic by itself.
	install := func(t *testing.T) *staleFollower {
		s := newStaleFollower(t, k, n, func(c *Config) { c.LogStore = LogStoreBolt })
		snap, _ := json.Marshal(commands(2, snapIndex, fakeLeaderTerm, "s"))
		req := &raft.InstallSnapshotRequest{
			RPCHeader:          raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("L"), Addr: []byte(s.fake.LocalAddr())},
			SnapshotVersion:    raft.SnapshotVersionMax,
			Term:               fakeLeaderTerm,
			LastLogIndex:       snapIndex,
			LastLogTerm:        fakeLeaderTerm,
			Configuration:      raft.EncodeConfiguration(s.conf),
			ConfigurationIndex: 1,
			Size:               int64(len(snap)),
		}
		var resp raft.InstallSnapshotResponse
		if err := s.fake.InstallSnapshot("f", raft.ServerAddress(s.node.Addr()), req, &resp, bytes.NewReader(snap)); err != nil {
			t.Fatalf("InstallSnapshot: %v", err)
		}
		if !resp.Success {
			t.Fatal("the node refused the snapshot")
		}
		return s
	}
	storedBelow := func(s *staleFollower) []uint64 {
		var out []uint64
		for i := uint64(1); i <= snapIndex; i++ {
			var l raft.Log
			if s.node.logs.GetLog(i, &l) == nil {
				out = append(out, i)
			}
		}
		return out
	}

	t.Run("raftnode", func(t *testing.T) {
		s := install(t)
		if left := storedBelow(s); len(left) > 0 {
			t.Fatalf("log entries %v are still stored below the installed snapshot at %d", left, snapIndex)
		}
		// And the node goes on from the snapshot.
		if !s.appendEntries(snapIndex, fakeLeaderTerm, snapIndex+1, &raft.Log{Index: snapIndex + 1, Term: fakeLeaderTerm, Type: raft.LogCommand, Data: []byte("after")}) {
			t.Fatal("the node refused the entry after the snapshot")
		}
		s.settled()
		if h := s.fsm.History(); h[len(h)-1] != (applied{snapIndex + 1, fakeLeaderTerm, "after"}) {
			t.Fatalf("last applied %v", h[len(h)-1])
		}
	})
	t.Run("hashicorp-raft-alone", func(t *testing.T) {
		withoutWorkarounds(t)
		s := install(t)
		if left := storedBelow(s); len(left) == 0 {
			t.Fatal("expected raft v1.7.3 to keep the old entries of a non-monotonic store")
		}
	})
}

// raft turns pre-vote off silently when its transport does not implement
// raft.WithPreVote (api.go, NewRaft); the clamping wrapper must keep it on:
// the node's first election request is a pre-vote.
func TestPreVoteStaysOnBehindTheClamp(t *testing.T) {
	s := newStaleFollower(t, 2, 0, func(c *Config) {
		c.HeartbeatTimeout, c.ElectionTimeout = 50*time.Millisecond, 50*time.Millisecond
		c.LeaderLeaseTimeout = 50 * time.Millisecond
	})
	select {
	case cmd := <-s.votes:
		if _, ok := cmd.(*raft.RequestPreVoteRequest); !ok {
			t.Fatalf("the node's first election request is a %T, want a pre-vote", cmd)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the node never asked for a vote")
	}
}

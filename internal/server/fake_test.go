package server

import (
	"context"
	"fmt"
	"github.com/lockcluster/lockcluster/internal/watchhist"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/testutil"
	"github.com/lockcluster/lockcluster/raftnode"
)

// The in-memory fake of the Replica interface: a log that one leader at a
// time appends to, committed the moment it is appended, and applied in
// order by every replica that is not held back, straight to its
// fsm.Machine. Servers built on it talk gRPC to each other over in-memory
// connections (bufconn), so forwarding, fan-out and heartbeats run as in
// production, without raft, in milliseconds.

type fakeLog struct {
	mu      sync.Mutex
	entries [][]byte
	term    uint64
	leader  string
	reps    []*fakeReplica
	extra   []raftnode.Member // joined by id only (no replica here)
	// learners: replicas that are non-voters (learner_fake_test.go).
	learners map[string]bool
	// fail, when set, decides a proposal's fate before it is appended:
	// appended says whether the entry goes into the log anyway.
	fail func(data []byte) (appended bool, err error)
}

type fakeReplica struct {
	log     *fakeLog
	id      string
	addr    string // its "raft" address
	m       *fsm.Machine
	sink    func(uint64, fsm.Applied)
	hist    *watchhist.History // fed as internal/node's raft adapter feeds it
	applied uint64
	held    bool
	subs    map[chan bool]struct{}
	// deposed: another node leads the log, but this one has not noticed
	// (a leader paused while another was elected): it still believes it
	// leads, and its ReadBarrier fails as a quorum no longer confirms it.
	deposed bool
	// unfit is what Unfit returns (raftnode's fences); the node's gRPC
	// server refuses calls with it, as internal/node's does (FenceUnary).
	unfit error
	// onBarrier, when set, runs at the start of every ReadBarrier, before
	// the log's lock is taken: what a test makes happen while a barrier
	// (a confirmation of leadership) is in flight.
	onBarrier atomic.Pointer[func()]
}

var _ Replica = (*fakeReplica)(nil)

// catchUpLocked applies every entry this replica has not applied yet.
func (r *fakeReplica) catchUpLocked() {
	for r.applied < uint64(len(r.log.entries)) {
		i := r.applied + 1
		e, err := fsm.DecodeEntry(r.log.entries[i-1])
		if err != nil {
			panic(fmt.Sprintf("fake replica %s: entry %d does not apply: %v", r.id, i, err))
		}
		ap := r.m.Apply(i, e)
		r.applied = i
		if r.hist != nil {
			r.hist.Append(i, e.Time, ap.Changes)
		}
		if r.sink != nil {
			r.sink(i, ap)
		}
	}
}

func (r *fakeReplica) notLeaderLocked() error {
	e := &raftnode.NotLeaderError{}
	for _, o := range r.log.reps {
		if o.id == r.log.leader && o.id != r.id {
			e.LeaderID, e.LeaderAddr = o.id, o.addr
		}
	}
	return e
}

func (r *fakeReplica) Propose(ctx context.Context, data []byte) (raftnode.ProposeResult, error) {
	l := r.log
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leader != r.id {
		return raftnode.ProposeResult{}, r.notLeaderLocked()
	}
	if err := ctx.Err(); err != nil {
		return raftnode.ProposeResult{}, fmt.Errorf("%w: %v", raftnode.ErrNotApplied, err)
	}
	var failed error
	if l.fail != nil {
		appended, err := l.fail(data)
		if !appended {
			return raftnode.ProposeResult{}, err
		}
		failed = err
	}
	l.entries = append(l.entries, data)
	idx := uint64(len(l.entries))
	var mine fsm.Applied
	sink := r.sink
	r.sink = func(i uint64, ap fsm.Applied) {
		if i == idx {
			mine = ap
		}
		sink(i, ap)
	}
	r.catchUpLocked()
	r.sink = sink
	for _, o := range l.reps {
		if o != r && !o.held {
			o.catchUpLocked()
		}
	}
	if failed != nil {
		return raftnode.ProposeResult{}, failed
	}
	return raftnode.ProposeResult{Index: idx, Response: mine}, nil
}

func (r *fakeReplica) ReadBarrier(ctx context.Context) error {
	if f := r.onBarrier.Load(); f != nil {
		(*f)()
	}
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	if r.log.leader != r.id || r.deposed {
		return r.notLeaderLocked()
	}
	r.catchUpLocked()
	return ctx.Err()
}

func (r *fakeReplica) IsLeader() bool {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	return r.log.leader == r.id || r.deposed
}

func (r *fakeReplica) Leader() (id, addr string) {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	if r.deposed {
		return r.id, r.addr
	}
	for _, o := range r.log.reps {
		if o.id == r.log.leader {
			return o.id, o.addr
		}
	}
	return "", ""
}

func (r *fakeReplica) SubscribeLeadership() (<-chan bool, func()) {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	ch := make(chan bool, 1)
	ch <- r.log.leader == r.id
	r.subs[ch] = struct{}{}
	return ch, func() {
		r.log.mu.Lock()
		defer r.log.mu.Unlock()
		delete(r.subs, ch)
	}
}

// publishLocked delivers a leadership level as raftnode does: an unread
// value is replaced by the newer one.
func (r *fakeReplica) publishLocked(leader bool) {
	for ch := range r.subs {
		select {
		case <-ch:
		default:
		}
		ch <- leader
	}
}

func (r *fakeReplica) State() string {
	if r.IsLeader() {
		return "Leader"
	}
	return "Follower"
}

func (r *fakeReplica) Stats() map[string]string {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	return map[string]string{"term": fmt.Sprint(r.log.term), "commit_index": fmt.Sprint(len(r.log.entries))}
}

func (r *fakeReplica) AppliedIndex() uint64 {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	return r.applied
}

func (r *fakeReplica) LastIndex() uint64 { return r.AppliedIndex() }

func (r *fakeReplica) Members() ([]raftnode.Member, error) {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	var out []raftnode.Member
	for _, o := range r.log.reps {
		out = append(out, raftnode.Member{ID: o.id, Addr: o.addr, Suffrage: r.log.suffrageLocked(o.id), Leader: o.id == r.log.leader})
	}
	return append(out, r.log.extra...), nil
}

func (r *fakeReplica) Join(ctx context.Context, id, addr string) error {
	return r.addServer(id, addr, "Voter")
}

// addServer adds id at addr to the fake configuration with suffrage (a
// replica of the fake cluster stays as it is; a known extra member gets
// the new address), on the leader.
func (r *fakeReplica) addServer(id, addr, suffrage string) error {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	if r.log.leader != r.id {
		return r.notLeaderLocked()
	}
	for _, o := range r.log.reps {
		if o.id == id {
			return nil
		}
	}
	for i, m := range r.log.extra {
		if m.ID == id {
			r.log.extra[i].Addr = addr
			return nil
		}
	}
	r.log.extra = append(r.log.extra, raftnode.Member{ID: id, Addr: addr, Suffrage: suffrage})
	return nil
}

func (r *fakeReplica) Leave(ctx context.Context, id string) error {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	if r.log.leader != r.id {
		return r.notLeaderLocked()
	}
	for i, m := range r.log.extra {
		if m.ID == id {
			r.log.extra = append(r.log.extra[:i], r.log.extra[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("%w: %q", raftnode.ErrNotMember, id)
}

func (r *fakeReplica) Unfit() error {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	return r.unfit
}

// fakeClock is the servers' clock (Config.Now): session deadlines move
// only when a test advances it.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// fakeCluster is n Servers on one fakeLog, each serving gRPC on an
// in-memory listener.
type fakeCluster struct {
	t     testing.TB
	log   *fakeLog
	clock *fakeClock
	nodes []*fakeNode
	lis   map[string]*bufconn.Listener
	// touches counts the Touch calls each node's server received.
	touches map[string]*atomic.Int64
	// forwarded counts the Locks calls (writes, reads) each node received
	// forwarded by another.
	forwarded map[string]*atomic.Int64
}

type fakeNode struct {
	id    string
	rep   *fakeReplica
	srv   *Server
	m     *fsm.Machine
	locks pb.LocksClient
	clus  pb.ClusterClient
	g     *grpc.Server
	cc    *grpc.ClientConn
	// down makes the node's API fail every unary call (a dead node, as
	// its peers see it).
	down *atomic.Bool
	// refuse, when set, answers the unary calls of the methods it returns
	// an error for (a node of an older release: Unimplemented).
	refuse *atomic.Pointer[func(method string) error]
}

type fakeOptions struct {
	// configure adjusts each node's Config before New.
	configure func(*Config)
	// machine makes each node's state machine (nil: fsm.New, group 0).
	machine func() *fsm.Machine
}

// newFakeCluster starts n servers, n1 leading, and returns once every
// node's record is in the member directory (forwarding needs it).
func newFakeCluster(t testing.TB, n int, o fakeOptions) *fakeCluster {
	t.Helper()
	fc := &fakeCluster{t: t, log: &fakeLog{leader: "n1", term: 1}, clock: newFakeClock(), lis: map[string]*bufconn.Listener{}, touches: map[string]*atomic.Int64{}, forwarded: map[string]*atomic.Int64{}}
	dial := grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		l := fc.lis[addr]
		if l == nil {
			return nil, fmt.Errorf("fake cluster: no node at %s", addr)
		}
		return l.DialContext(ctx)
	})
	opts := []grpc.DialOption{dial, grpc.WithTransportCredentials(insecure.NewCredentials())}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("n%d", i)
		fc.lis["api-"+id] = bufconn.Listen(1 << 20)
		fc.touches[id] = &atomic.Int64{}
		fc.forwarded[id] = &atomic.Int64{}
	}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("n%d", i)
		m := fsm.New()
		if o.machine != nil {
			m = o.machine()
		}
		m.KeepChanges(true)
		cfg := Config{Machine: m, Self: fsm.Member{ID: id, RaftAddr: "raft-" + id, GRPCAddr: "passthrough:///api-" + id},
			Now: fc.clock.Now, DialOptions: opts, SessionTick: 2 * time.Millisecond, HeartbeatFlush: time.Millisecond}
		if testing.Verbose() {
			cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: id, Level: hclog.Debug})
		}
		if o.configure != nil {
			o.configure(&cfg)
		}
		srv := New(cfg)
		rep := &fakeReplica{log: fc.log, id: id, addr: "raft-" + id, m: m, sink: srv.Apply, hist: srv.History(), subs: map[chan bool]struct{}{}}
		fc.log.reps = append(fc.log.reps, rep)
		touches, forwarded := fc.touches[id], fc.forwarded[id]
		down := &atomic.Bool{}
		refuse := &atomic.Pointer[func(string) error]{}
		g := grpc.NewServer(append(DecodeOptions(), grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if info.FullMethod == pb.Cluster_Touch_FullMethodName {
				touches.Add(1)
			}
			if isForwarded(ctx) && isLocksCall(info.FullMethod) {
				forwarded.Add(1)
			}
			if down.Load() {
				return nil, status.Error(codes.Unavailable, "fake node is down")
			}
			if f := refuse.Load(); f != nil {
				if err := (*f)(info.FullMethod); err != nil {
					return nil, err
				}
			}
			return h(ctx, req)
		}, FenceUnary(rep.Unfit)))...)
		srv.Register(g)
		cc, err := grpc.NewClient("passthrough:///api-"+id, opts...)
		if err != nil {
			t.Fatal(err)
		}
		fc.nodes = append(fc.nodes, &fakeNode{id: id, rep: rep, srv: srv, m: m, locks: pb.NewLocksClient(cc), clus: pb.NewClusterClient(cc), g: g, cc: cc, down: down, refuse: refuse})
	}
	// Every replica exists before any server runs.
	for _, n := range fc.nodes {
		wg.Add(2)
		go func() { defer wg.Done(); _ = n.g.Serve(fc.lis["api-"+n.id]) }()
		go func() { defer wg.Done(); n.srv.Run(ctx, n.rep) }()
	}
	t.Cleanup(func() {
		cancel()
		for _, n := range fc.nodes {
			n.cc.Close()
			n.g.Stop()
		}
		wg.Wait()
	})
	fc.waitDirectory()
	fc.waitSecret() // level_fake_test.go
	return fc
}

func (fc *fakeCluster) node(id string) *fakeNode {
	for _, n := range fc.nodes {
		if n.id == id {
			return n
		}
	}
	fc.t.Fatalf("no node %s", id)
	return nil
}

// elect makes id the leader ("" for none) in a new term, as raft would:
// the new leader has applied the whole log.
func (fc *fakeCluster) elect(id string) {
	l := fc.log
	l.mu.Lock()
	defer l.mu.Unlock()
	l.term++
	l.leader = id
	for _, r := range l.reps {
		if r.id == id {
			r.held = false
			r.catchUpLocked()
		}
		r.publishLocked(r.id == id)
	}
}

// hold stops a replica applying (a follower that lags); release lets it
// catch up.
func (fc *fakeCluster) hold(id string, held bool) {
	l := fc.log
	l.mu.Lock()
	defer l.mu.Unlock()
	r := fc.node(id).rep
	r.held = held
	if !held {
		r.catchUpLocked()
	}
}

// setUnfit raises a fence on node id (nil lowers it): as raftnode's Unfit
// would say err.
func (fc *fakeCluster) setUnfit(id string, err error) {
	r := fc.node(id).rep
	fc.log.mu.Lock()
	defer fc.log.mu.Unlock()
	r.unfit = err
}

// entries is the log's length.
func (fc *fakeCluster) entries() int {
	fc.log.mu.Lock()
	defer fc.log.mu.Unlock()
	return len(fc.log.entries)
}

// commands decodes the log from index from (1-based) on.
func (fc *fakeCluster) commands(from int) []fsm.Command {
	fc.log.mu.Lock()
	defer fc.log.mu.Unlock()
	var out []fsm.Command
	for _, data := range fc.log.entries[from-1:] {
		e, err := fsm.DecodeEntry(data)
		if err != nil {
			fc.t.Fatal(err)
		}
		out = append(out, e.Cmd)
	}
	return out
}

// waitDirectory waits until every node's record is in every applied
// member directory.
func (fc *fakeCluster) waitDirectory() {
	fc.t.Helper()
	eventually(fc.t, "every node in the member directory", func() bool {
		for _, n := range fc.nodes {
			if len(n.m.Members()) != len(fc.nodes) {
				return false
			}
		}
		return true
	})
}

// eventually is testutil.Eventually with a deadline that only stops a hung
// test: what the fake cluster waits for needs no bound of its own.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, what, cond)
}

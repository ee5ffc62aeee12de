// Package node wires one lockcluster member together: the lock manager
// (fsm) behind its raft adapter, the Raft member (raftnode), the gRPC
// services (internal/server, health, reflection), the HTTP endpoints and
// its TLS (tls.go: the files' server and peer configurations;
// streamlayer.go: raft over TLS). The lockcluster binary's serve command
// and the multi-node tests use it.
//
// This package is implementation, not API: it makes no compatibility
// promise, and it exports only what other lockcluster packages use. The
// stable API is the client (package lockcluster) and the wire contract
// (api/lockclusterv1).
package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/lockcluster/lockcluster/internal/watchhist"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/fsm/raftfsm"
	"github.com/lockcluster/lockcluster/internal/auth"
	"github.com/lockcluster/lockcluster/internal/metrics"
	"github.com/lockcluster/lockcluster/internal/raftmux"
	"github.com/lockcluster/lockcluster/internal/server"
	"github.com/lockcluster/lockcluster/internal/web"
	"github.com/lockcluster/lockcluster/raftnode"
)

// Config configures a node.
type Config struct {
	ID      string
	DataDir string
	// Listen addresses; port 0 picks a free port (tests).
	GRPCAddr string
	RaftAddr string
	HTTPAddr string // empty: no HTTP server
	// Advertised addresses, when other nodes and clients must use another
	// host than the listen address (0.0.0.0, containers). Default: the
	// listen address.
	AdvertiseGRPC string
	AdvertiseRaft string
	AdvertiseHTTP string
	// Bootstrap lists the first voters of a new cluster (this node among
	// them); used only when DataDir is empty.
	Bootstrap []raftnode.Peer
	// Join is the gRPC address of a member to join through, when DataDir is
	// empty and Bootstrap is not set.
	Join string
	// JoinLearner joins as a learner, which the leader promotes to voter
	// once it has caught up (JoinRequest.learner; serve's default), rather
	// than as a voter at once.
	JoinLearner bool
	// Raft carries raft tuning (timeouts, batching, snapshots); its ID,
	// DataDir, BindAddr, AdvertiseAddr, Bootstrap and Logger are set here.
	Raft   raftnode.Config
	Server server.Config // Machine, Self and Logger are set here
	Logger hclog.Logger

	// TLS, when any file is set, secures the client API, the raft links
	// (both ways verified against the CA) and the HTTP port.
	TLS TLSFiles
	// TLSWatchInterval, when positive, is how often the node checks its
	// TLS files and loads them again when they changed (reload.go).
	TLSWatchInterval time.Duration
	// Auth, when configured, requires credentials (see package auth).
	Auth auth.Config
	// MaxMessageBytes bounds a gRPC message (default 4 MiB).
	MaxMessageBytes int
	// MaxConnsPerIP caps the client API connections open from one remote
	// address (default DefaultMaxConnsPerIP, -1: no cap): one past it is
	// closed as soon as it is accepted (connlimit.go).
	MaxConnsPerIP int
	// MaxConcurrentStreams caps the calls and streams one client API
	// connection may have open at once (default
	// DefaultMaxConcurrentStreams): a client's further ones wait for one
	// to end.
	MaxConcurrentStreams int
	// ConnIdleTimeout closes a client API connection that has had no call
	// or stream open for this long (default DefaultConnIdleTimeout, -1:
	// never); its client connects again when it next calls.
	ConnIdleTimeout time.Duration
	// EnablePprof serves net/http/pprof at /debug/pprof/ on the HTTP
	// address, behind the admin credential when auth is on.
	EnablePprof bool
	// Groups is the number of Raft groups the cluster runs (0 or 1: one,
	// the cluster as before groups; at most MaxGroups). Every member of a
	// cluster of several groups is bootstrapped with the same number
	// (groups.go).
	Groups int
	// MoveHook, when set, runs before the mover proposes a step of a move
	// ("import" in the target, "drop" or "unfreeze" in the source), on
	// the mover's goroutine: tests hold a move at a step with it, to stop
	// a leader there (mover.go).
	MoveHook func(step string, from, to uint16)
}

// Node is a running member.
type Node struct {
	cfg     Config
	log     hclog.Logger
	raft    *raftnode.Node
	machine *fsm.Machine
	srv     *server.Server
	// pageFeeds counts the status page's live feeds (/api/events) open on
	// this node: readers of the watch history like watches, and counted
	// with them in lockcluster_watches.
	pageFeeds atomic.Int64
	hist      *watchhist.History // the watch history: watches and the status page's live feed
	metrics   *metrics.Metrics
	grpc      *grpc.Server
	health    *health.Server
	http      *http.Server
	grpcLis   net.Listener
	httpLis   net.Listener
	conns     *connLimiter // wraps grpcLis
	cancel    context.CancelFunc
	// Set by secure: gRPC server options, the HTTP TLS configuration.
	serverOptions []grpc.ServerOption
	authz         *auth.Authorizer
	httpTLS       *tls.Config
	digests       *digestCache // debug.go
	wg            sync.WaitGroup
	once          sync.Once
	closeErr      error
	removed       chan struct{} // removed.go

	// reload.go: the TLS files in force (nil without TLS: tls.go), and one
	// Reload at a time.
	tls      *tlsStore
	reloadMu sync.Mutex

	// groups.go: with several groups, every group (group 0 first, whose
	// machine, raft member and server are also machine, raft and srv
	// above), the raft port they share, and whether this node's replicas
	// show the initial spread done (spread.go). groups is nil with one.
	groups     []*group
	mux        *raftmux.Mux
	spreadDone atomic.Bool
	moverKick  chan struct{}          // wakes the mover (mover.go)
	routes     atomic.Pointer[routes] // with several groups: where each slot is served (routes.go)
	groupState *groupState            // what the metrics read (groupstate.go)
}

// Start starts a node and returns once it serves (it may not have a leader
// yet).
func Start(cfg Config) (*Node, error) {
	if cfg.ID == "" || cfg.DataDir == "" {
		return nil, errors.New("node: an id and a data directory are required")
	}
	if err := checkGroups(cfg); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "lockcluster", Output: os.Stderr, Level: hclog.Info})
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("node: data directory %s: %w", cfg.DataDir, err)
	}
	if err := checkGroupCount(cfg); err != nil { // groups.go
		return nil, err
	}
	n := &Node{moverKick: make(chan struct{}, 1), cfg: cfg, log: cfg.Logger.With("node", cfg.ID), removed: make(chan struct{})}
	if err := n.secure(); err != nil {
		return nil, err
	}
	var err error
	if n.grpcLis, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
		return nil, fmt.Errorf("node: gRPC address %s: %w", cfg.GRPCAddr, err)
	}
	if cfg.HTTPAddr != "" {
		if n.httpLis, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			n.grpcLis.Close()
			return nil, fmt.Errorf("node: HTTP address %s: %w", cfg.HTTPAddr, err)
		}
	}
	if err := n.start(); err != nil {
		n.grpcLis.Close()
		if n.httpLis != nil {
			n.httpLis.Close()
		}
		return nil, err
	}
	return n, nil
}

func (n *Node) start() error {
	cfg := n.cfg
	var err error
	n.machine = fsm.New()
	// Watches stream the changes of the entries this node applies: once
	// the cluster has been watched (fsm's startchanges.go), the machine
	// collects them and the history keeps the recent ones. The history is
	// fed from raft's first apply or restore, before the server exists
	// (internal/watchhist).
	n.machine.KeepChangesWhenWatched()
	hist := watchhist.New(cfg.Server.WatchHistory)
	n.hist = hist
	var state metrics.State = n.machine
	if cfg.Groups > 1 {
		n.groupState = &groupState{zero: n.machine} // every group's, once they are built (groupstate.go)
		state = n.groupState
	}
	n.metrics = metrics.New(state, metrics.WithReplica(cfg.ID)) // before raft starts: it installs go-metrics' sink
	self := fsm.Member{ID: cfg.ID, GRPCAddr: orElse(cfg.AdvertiseGRPC, n.grpcLis.Addr().String())}
	if n.httpLis != nil {
		self.HTTPAddr = orElse(cfg.AdvertiseHTTP, n.httpLis.Addr().String())
	}
	// The raft address is known once the transport listens: Self is filled
	// in after raftnode.New, before the server runs.
	scfg := n.cfg.Server
	scfg.Machine, scfg.Logger, scfg.Observer, scfg.History = n.machine, n.log.Named("api"), n.metrics, hist
	scfg.IsAdmin = n.adminCall() // nil with auth off: no caller is an admin
	scfg.NodeIdentity = n.authz.NodeIdentity
	// Calls on session streams pass the interceptors unary calls pass.
	scfg.CallInterceptor = chainCalls(n.metrics.CallInterceptor(), n.authz.Unary(), server.FenceUnary(func() error { return n.raft.Unfit() })) // n.raft is set below
	rcfg := n.cfg.Raft
	rcfg.ID, rcfg.DataDir, rcfg.BindAddr, rcfg.AdvertiseAddr = cfg.ID, filepath.Join(cfg.DataDir, "raft"), cfg.RaftAddr, cfg.AdvertiseRaft
	rcfg.Bootstrap, rcfg.Logger = cfg.Bootstrap, n.log.Named("raft")
	// A cluster this node bootstraps is stamped with this node's protocol
	// level: the floor below which no member runs (server/level.go).
	rcfg.BootstrapStamp = uint64(orDefault(scfg.ProtocolLevel, fsm.ProtocolLevel))
	if cfg.Groups > 1 {
		if n.mux, err = n.raftMux(); err != nil {
			return err
		}
		layer, err := n.mux.Group(0)
		if err != nil {
			return err
		}
		rcfg.StreamLayer, rcfg.BindAddr = layer, ""
	}
	srvHolder := &sinkHolder{}
	adapter := n.adapter(n.machine, hist, srvHolder, n.log.Named("fsm"))
	if n.raft, err = raftnode.New(rcfg, adapter); err != nil {
		n.closeMux()
		return fmt.Errorf("node: %w", err)
	}
	self.RaftAddr = n.raft.Addr()
	scfg.Self = self
	base := scfg
	scfg.BootstrapLevel = int(n.raft.BootstrapStamp())
	n.srv = server.New(scfg)
	srvHolder.set(n.srv)
	if cfg.Groups > 1 {
		n.groups = []*group{{id: 0, machine: n.machine, hist: hist, raft: n.raft, srv: n.srv}}
		for g := 1; g < cfg.Groups; g++ {
			gr, err := n.startGroup(uint16(g), base, n.mux)
			if err != nil {
				n.closeGroups()
				return err
			}
			n.groups = append(n.groups, gr)
		}
		ms := make([]*fsm.Machine, len(n.groups))
		for i, gr := range n.groups {
			ms[i] = gr.machine
		}
		n.groupState.groups.Store(&ms)
		n.routes.Store(newRoutes(n.groups))
	}

	// A pool of stream workers serves RPCs on reused goroutines instead of
	// a new goroutine (and stack growth) per call: less CPU per request.
	opts := append(n.metrics.ServerOptions(), grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))))
	// Before auth: garbage is InvalidArgument (it names no namespace), and
	// auth's refusals reach the audit log.
	opts = append(opts, server.DecodeOptions()...)
	// Before the audit log: a non-member's forwarding marks are gone.
	opts = append(opts, n.srv.MemberOptions()...)
	opts = append(opts, n.srv.AuditOptions()...)
	opts = append(opts, n.serverOptions...)
	// After auth: a diverged replica answers nothing from its state. With
	// several groups the router fences each call by its group.
	if n.groups == nil {
		opts = append(opts, grpc.ChainUnaryInterceptor(server.FenceUnary(n.raft.Unfit)),
			grpc.ChainStreamInterceptor(server.FenceStream(n.raft.Unfit, n.raft.Fenced)))
	}
	opts = append(opts, grpc.MaxConcurrentStreams(uint32(orDefault(cfg.MaxConcurrentStreams, DefaultMaxConcurrentStreams))))
	n.grpc = grpc.NewServer(opts...)
	n.metrics.Health(n.raft)
	n.metrics.Watches(func() int64 { return n.srv.Watches() + n.pageFeeds.Load() }, hist)
	if n.groups == nil {
		n.srv.Register(n.grpc)
	} else {
		rt := &router{groups: n.groups, routes: n.routes.Load(), node: n}
		pb.RegisterLocksServer(n.grpc, rt)
		pb.RegisterClusterServer(n.grpc, rt)
	}
	n.health = health.NewServer()
	healthpb.RegisterHealthServer(n.grpc, n.health)
	reflection.Register(n.grpc)
	n.metrics.InitializeGRPC(n.grpc)
	n.conns = newConnLimiter(n.grpcLis, max(orDefault(cfg.MaxConnsPerIP, DefaultMaxConnsPerIP), 0), keepaliveTimeout, nil, n.log.Named("api"))
	n.conns.refusedHook = n.metrics.Connections(n.conns.Open)

	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.wg.Add(2)
	go func() { defer n.wg.Done(); n.srv.Run(ctx, n.raft) }()
	if n.groups != nil {
		n.runGroups(ctx) // groups.go
	}
	go func() { defer n.wg.Done(); _ = n.grpc.Serve(n.conns) }()
	if n.httpLis != nil {
		n.http = &http.Server{Handler: n.httpHandler(), ReadHeaderTimeout: 5 * time.Second, TLSConfig: n.httpTLS}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if n.httpTLS != nil {
				_ = n.http.ServeTLS(n.httpLis, "", "")
			} else {
				_ = n.http.Serve(n.httpLis)
			}
		}()
	}
	n.wg.Add(2)
	go func() { defer n.wg.Done(); n.watchHealth(ctx) }()
	go func() { defer n.wg.Done(); n.watchRemoval(ctx) }()
	if n.tls != nil && cfg.TLSWatchInterval > 0 {
		n.wg.Add(1)
		go func() { defer n.wg.Done(); n.watchTLS(ctx, cfg.TLSWatchInterval) }() // reload.go
	}
	if cfg.Join != "" && len(cfg.Bootstrap) == 0 {
		n.wg.Add(1)
		go func() { defer n.wg.Done(); n.join(ctx, self) }()
	}
	n.log.Info("serving", "grpc", self.GRPCAddr, "raft", self.RaftAddr, "http", self.HTTPAddr, "data", cfg.DataDir)
	return nil
}

// adapter is a group's raft adapter: after each applied entry its sink
// counts the entry's events (metrics), feeds the group's watch history,
// and hands the entry to the group's server once h holds it.
func (n *Node) adapter(m *fsm.Machine, hist *watchhist.History, h *sinkHolder, log hclog.Logger) *raftfsm.FSM {
	return raftfsm.New(m, raftfsm.WithSink(func(i uint64, t int64, ap fsm.Applied) {
		n.metrics.Applied(i, ap)
		if ap.Kept && (ap.Move == nil || ap.Move.Kind != fsm.MoveImport) {
			hist.Append(i, t, ap.Changes)
		} else {
			// An Import brings namespaces whose earlier changes are in
			// another group's log: no watch resumes across it here (it
			// gets COMPACTED and starts again from a snapshot).
			hist.Skip(i)
		}
		h.apply(i, ap)
		if ap.Move != nil {
			n.kickMover() // the move's next step may be this node's (mover.go)
			if rt := n.routes.Load(); rt != nil {
				rt.notify() // parked calls look again (routes.go)
			}
		}
	}), raftfsm.WithRestored(hist.Restored), raftfsm.WithLogger(log))
}

// sinkHolder lets the raft adapter, built before the server, deliver to it.
// Entries applied before the server exists (log replay at start) are only
// published once the server is set; the server reads the machine's state
// when it needs it, so nothing is lost. (The watch history, which needs
// every entry's changes, is fed directly: it exists before raft.)
type sinkHolder struct {
	mu  sync.RWMutex
	srv *server.Server
}

func (h *sinkHolder) set(s *server.Server) { h.mu.Lock(); h.srv = s; h.mu.Unlock() }
func (h *sinkHolder) apply(index uint64, ap fsm.Applied) {
	h.mu.RLock()
	s := h.srv
	h.mu.RUnlock()
	if s != nil {
		s.Apply(index, ap)
	}
}

// join asks a member to add this node, until it is a member.
func (n *Node) join(ctx context.Context, self fsm.Member) {
	cc, err := grpc.NewClient(n.cfg.Join, n.cfg.Server.DialOptions...)
	if token := n.nodeToken(); token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	if err != nil {
		n.log.Error("cannot join: bad join address", "join", n.cfg.Join, "error", err)
		return
	}
	defer cc.Close()
	req := &pb.JoinRequest{Id: self.ID, RaftAddr: self.RaftAddr, GrpcAddr: self.GRPCAddr, HttpAddr: self.HTTPAddr, Learner: n.cfg.JoinLearner}
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := pb.NewClusterClient(cc).Join(cctx, req)
		cancel()
		if err == nil {
			n.log.Info("joined the cluster", "through", n.cfg.Join, "voters", resp.Voters, "learner", resp.Learner)
			if resp.Warning != "" {
				n.log.Warn(resp.Warning)
			}
			return
		}
		n.log.Warn("joining the cluster failed; retrying", "through", n.cfg.Join, "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// watchHealth reports SERVING through the gRPC health service while the
// node has a leader and is fit to serve (raftnode.Node.Unfit: not diverged,
// damaged, failing to write, or behind).
//
// It re-checks on every change of this node's leadership as well as on its
// tick, so a probe right after an election sees the new leader at once.
func (n *Node) watchHealth(ctx context.Context) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	leadership, cancel := n.raft.SubscribeLeadership()
	defer cancel()
	for {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if n.unready() == nil {
			st = healthpb.HealthCheckResponse_SERVING
		}
		n.health.SetServingStatus("", st)
		n.health.SetServingStatus(pb.Locks_ServiceDesc.ServiceName, st)
		select {
		case <-ctx.Done():
			return
		case _, ok := <-leadership:
			if !ok {
				leadership = nil
			}
		case <-tick.C:
		}
	}
}

func (n *Node) httpHandler() http.Handler {
	mux := http.NewServeMux()
	// With auth on, the metrics and the status page show every namespace:
	// they need the admin credential.
	var authorize func(*http.Request) bool
	if n.authz.Enabled() {
		authorize = n.authz.HTTP
	}
	mux.Handle("/metrics", web.Protect(authorize, n.metrics.Handler()))
	mux.Handle("/", web.Handler(web.Options{NodeID: n.cfg.ID, Machine: n.machine, Raft: n.raft, Authorize: authorize, Health: n.memberHealth, History: n.hist,
		StartChanges: func(ctx context.Context) error { return n.srv.StartChanges(ctx, nil) }, Feeds: &n.pageFeeds}))
	mux.HandleFunc("/livez", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := n.unready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	n.digests = newDigestCache(n.machine, time.Now)
	mux.Handle("/debug/digest", web.Protect(authorize, http.HandlerFunc(n.serveDigest))) // debug.go
	if n.cfg.EnablePprof {
		mux.Handle("/debug/pprof/", web.Protect(authorize, pprofHandler()))
	}
	return mux
}

// GRPCAddr is the address the node serves gRPC on.
func (n *Node) GRPCAddr() string { return n.grpcLis.Addr().String() }

// HTTPAddr is the address of the HTTP endpoints ("" when off).
func (n *Node) HTTPAddr() string {
	if n.httpLis == nil {
		return ""
	}
	return n.httpLis.Addr().String()
}

// RaftAddr is the node's raft address.
func (n *Node) RaftAddr() string { return n.raft.Addr() }

// ID is the node's id.
func (n *Node) ID() string { return n.cfg.ID }

// Raft is the node's Raft member.
func (n *Node) Raft() *raftnode.Node { return n.raft }

// Machine is the node's lock manager.
func (n *Node) Machine() *fsm.Machine { return n.machine }

// Close stops the node gracefully: a leader hands leadership over first,
// then gRPC drains, then raft stops.
func (n *Node) Close(ctx context.Context) error {
	n.once.Do(func() {
		n.health.Shutdown()
		n.cancel() // session streams end: their clients move to other nodes
		err := n.raft.Shutdown(ctx)
		if gerr := n.shutdownGroups(ctx); err == nil {
			err = gerr
		}
		stopped := make(chan struct{})
		go func() { n.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-ctx.Done():
			n.grpc.Stop()
		case <-time.After(2 * time.Second):
			n.grpc.Stop()
		}
		if n.http != nil {
			_ = n.http.Close()
		}
		n.wg.Wait()
		n.closeMux()
		n.closeErr = err
	})
	return n.closeErr
}

// orDefault is v, or def when v is 0; a negative v means none (0).
func orDefault[T int | time.Duration](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

func orElse(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// chainCalls runs interceptors in order, the first outermost, as
// grpc.ChainUnaryInterceptor does for unary calls.
func chainCalls(ics ...grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		next := h
		for i := len(ics) - 1; i >= 0; i-- {
			ic, inner := ics[i], next
			next = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, inner) }
		}
		return next(ctx, req)
	}
}

// memberHealth is what the leader sees of each member, for the status
// page: the server's Members answer, which a follower forwards.
func (n *Node) memberHealth() map[string]web.Health {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := n.srv.Members(ctx, &pb.MembersRequest{})
	if err != nil {
		return nil
	}
	out := map[string]web.Health{}
	for _, m := range resp.Members {
		if !m.Probed {
			continue
		}
		h := web.Health{Reachable: m.Reachable, Lag: m.Lag, SinceContactSeconds: -1, Unfit: m.Unfit}
		if m.SinceContact != nil {
			h.SinceContactSeconds = m.SinceContact.AsDuration().Seconds()
		}
		out[m.Id] = h
	}
	return out
}

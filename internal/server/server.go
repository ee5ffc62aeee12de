package server

import (
	"context"
	"fmt"
	"github.com/lockcluster/lockcluster/internal/watchhist"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/raftnode"
	"github.com/lockcluster/lockcluster/session"
)

// Config configures a Server.
type Config struct {
	Machine *fsm.Machine
	// Self is this node's record in the member directory (its id, and the
	// addresses it serves raft, gRPC and HTTP on).
	Self   fsm.Member
	Logger hclog.Logger
	// Now is the leader's clock for the times put into entries.
	Now func() time.Time
	// DialOptions are used to reach other nodes' APIs (forwarding).
	DialOptions []grpc.DialOption
	// SessionTick is the resolution of session deadlines (default 50ms).
	SessionTick time.Duration
	// AttachesInFlight bounds the session attaches a node works on at once
	// (default 64); AttachQueue more wait up to 2 s (default 2048, -1:
	// none), and the rest are refused at once, retryably (admission.go).
	AttachesInFlight, AttachQueue int
	// HeartbeatFlush is how long a follower gathers heartbeats before it
	// forwards them to the leader in one call (default 20ms).
	HeartbeatFlush time.Duration
	// DefaultTTL is a session's TTL when the client names none (10s).
	DefaultTTL time.Duration
	// NodeToken is the credential this node presents to the others when it
	// forwards a call or a heartbeat ("" when auth is off or by certificate).
	NodeToken string
	// Limits, when set, are the replicated limits this node proposes when
	// it becomes leader, if they differ from those in force.
	Limits *fsm.Limits
	// SessionRate bounds the writes per second of one session on this node
	// (0: no bound); SessionBurst is the burst allowed above it.
	SessionRate  float64
	SessionBurst int
	// NamespaceRate bounds the writes per second one namespace may put in
	// the log (0: no bound); NamespaceBurst is the burst allowed above it.
	// NamespaceBytesRate bounds the bytes of entries (fsm.EntryBytes) per
	// second one namespace may put in the log (0: no bound), with a burst
	// of NamespaceBytesBurst bytes. Each node checks the writes its clients
	// send it, the leader all of them again (quota.go).
	NamespaceRate       float64
	NamespaceBurst      int
	NamespaceBytesRate  float64
	NamespaceBytesBurst int
	// RefusalRate paces the refusals over a limit of one namespace on this
	// node: past this many a second (and a burst of as many), each further
	// refusal is answered only after a wait (at most a second) instead of
	// at once, so a tenant that floods calls its limits refuse cannot
	// spend the node's CPU on them (0: no pacing).
	RefusalRate float64
	// IsAdmin reports whether a call carries an admin credential with auth
	// on (nil, or auth off: never). An admin may release, abort or close
	// any session without its secret; it is audited.
	IsAdmin func(context.Context) bool
	// NodeIdentity reports whether a client-certificate identity is one
	// auth knows as a node's (its admin identities): beside an identity
	// that names a member, such a certificate proves that a call comes
	// from a member (member.go). nil: none.
	NodeIdentity func(identity string) bool
	// AuditRefusalInterval paces the audit log's refused credentials: per
	// peer, the first few of an interval are written in full, the rest
	// counted into one line at its end (default 10s; auditpace.go).
	AuditRefusalInterval time.Duration
	// StreamBacklogBytes caps the events a session stream has not sent yet,
	// in encoded bytes (default DefaultStreamBacklogBytes); a stream that
	// falls further behind is cut and its client resynchronises.
	StreamBacklogBytes int
	// MaxStreamsPerSession caps the streams one session may have attached
	// to this node (default DefaultMaxStreamsPerSession, -1: no cap): an
	// attach past it replaces the session's oldest stream here.
	MaxStreamsPerSession int
	// StreamSendTimeout cuts a session stream whose client has taken
	// nothing of it for this long (default DefaultStreamSendTimeout).
	StreamSendTimeout time.Duration
	// ProbeInterval is how often the leader probes each member's API for
	// Members' reachability and lag (default 1s).
	ProbeInterval time.Duration
	// CallInterceptor, when set, wraps the calls that arrive on session
	// streams (requests, releases, aborts) as the gRPC server's unary
	// interceptors wrap unary calls (metrics, auth, fence); the audit log
	// sees them in any case.
	CallInterceptor grpc.UnaryServerInterceptor
	// Observer hears of the requests this node proposed, for the acquire
	// and hand-off latency metrics (default: nothing).
	Observer Observer
	// ProtocolLevel is the protocol level this node reports and counts
	// itself at (default fsm.ProtocolLevel; level.go). Only tests set it,
	// to play a node of an older release: a node never proposes above it.
	ProtocolLevel int
	// WatchHistory is how many changes the node keeps for watches to
	// resume from (default watchhist.DefaultSize).
	WatchHistory int
	// History is the watch history, which whoever applies the entries
	// feeds (WatchHistory.Append after every entry, Restored after a
	// snapshot is restored) from before the first entry is applied, with
	// the machine keeping its changes (fsm.Machine.KeepChanges):
	// internal/node does, from its raft adapter. nil: New makes one of
	// WatchHistory changes, which the caller feeds through History().
	History *watchhist.History
	// WatchProgressInterval is how long a watch sends nothing before it
	// says how far it has got (default DefaultWatchProgressInterval).
	WatchProgressInterval time.Duration
	// WatchCoalesce is how long a woken watch waits for more entries
	// before it reads the history (default DefaultWatchCoalesce; negative:
	// not at all).
	WatchCoalesce time.Duration
	// BootstrapLevel is the protocol level of the release that bootstrapped
	// this cluster, when this node bootstrapped it (raftnode's
	// BootstrapStamp); 0 when unknown. A member the leader has not heard
	// from counts at it (level.go).
	BootstrapLevel int
	// Group is the Raft group this server serves (0: the first, and the
	// only one of a cluster of one group). A server of a group g ≥ 1
	// leaves the cluster-wide duties to group 0's: it neither records
	// this node in the member directory nor draws the cluster secret
	// (internal/node's group manager; groups.md §10.3).
	Group uint16
	// Directory is the machine that holds the member directory and the
	// cluster secret, which this server forwards and checks members by:
	// group 0's (nil: Machine, which is group 0's when Group is 0).
	Directory *fsm.Machine
}

// Observer is told, on the node that proposed an entry, when a request was
// answered and when a release, abort or session end was applied; start is
// when the call arrived. It is also told, on the node the client called,
// of every call or session stream refused for its credentials, by reason
// (RefusalReasons). internal/metrics implements it.
type Observer interface {
	Requested(namespace string, session, requestID uint64, start time.Time, r fsm.Result)
	Freed(start time.Time, ap fsm.Applied)
	Refused(reason string)
}

type nopObserver struct{}

func (nopObserver) Requested(string, uint64, uint64, time.Time, fsm.Result) {}
func (nopObserver) Freed(time.Time, fsm.Applied)                            {}
func (nopObserver) Refused(string)                                          {}

// Server serves lockcluster.v1 on one node.
type Server struct {
	pb.UnimplementedLocksServer
	pb.UnimplementedClusterServer

	cfg        Config
	m          *fsm.Machine
	dir        *fsm.Machine // Config.Directory: the member directory and the cluster secret
	node       atomic.Pointer[replicaCell]
	live       *session.Liveness // session deadlines and heartbeats: session/DESIGN.md
	hub        *hub
	peers      *peers
	rate       *rateLimiter[uint64] // per session
	nsRate     *rateLimiter[string] // per namespace (quota.go)
	nsBytes    *rateLimiter[string] // bytes per namespace (quota.go)
	refusal    *rateLimiter[string] // paces a namespace's limit refusals
	gate       gate                 // admit.go
	probes     prober               // probe.go
	levels     levels               // level.go: the cluster's protocol level
	members    membership           // membership.go: join, leave, the member directory
	callAudit  *auditor             // audits the calls on session streams
	refusals   *refusalPacer        // paces the audit log's refusals (auditpace.go)
	leaderless leaderless           // since when this node has known no leader (touch.go)
	attaches   *attachGate          // admission.go
	member     memberState          // member.go: member-only calls, the cluster secret
	reload     reloadState          // reload.go: settings a reload changed
	streams    atomic.Int64         // session streams attached, their handlers running (stream.go)
	hist       *watchhist.History   // watchhist.go
	watches    atomic.Int64         // watches served (watch.go)
	log        hclog.Logger
	done       chan struct{} // closed when Run returns: streams end
}

// New returns a Server. Pass its Apply to the raft adapter as the sink,
// build the raft node, then call Start with it.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	if cfg.DefaultTTL <= 0 {
		cfg.DefaultTTL = 10 * time.Second
	}
	if cfg.DialOptions == nil {
		cfg.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	s := &Server{cfg: cfg, m: cfg.Machine, dir: cfg.Directory, log: cfg.Logger, done: make(chan struct{})}
	if s.dir == nil {
		s.dir = cfg.Machine
	}
	s.hist = cfg.History
	if s.hist == nil {
		s.hist = watchhist.New(cfg.WatchHistory)
	}
	s.members.s = s
	s.reload.limitsChanged = make(chan struct{}, 1)
	queue := cfg.AttachQueue
	if queue == 0 {
		queue = defaultAttachQueue
	}
	s.attaches = newAttachGate(cfg.AttachesInFlight, queue)
	s.hub = newHub(cfg.Machine.LastIndex, cfg.StreamBacklogBytes)
	s.hub.logical = cfg.Machine.Logical
	s.hub.maxStreams = cfg.MaxStreamsPerSession
	if s.hub.maxStreams == 0 {
		s.hub.maxStreams = DefaultMaxStreamsPerSession
	}
	s.peers = newPeers(cfg.DialOptions)
	s.live = session.New(session.Config{Expirer: expirer{s}, Log: sessionLog{s}, Forwarder: forwarder{s}, Served: s.served,
		Tick: cfg.SessionTick, Flush: cfg.HeartbeatFlush, Logger: cfg.Logger.Named("session"), Now: cfg.Now})
	s.rate = newRateLimiter[uint64](cfg.SessionRate, cfg.SessionBurst)
	s.nsRate = newRateLimiter[string](cfg.NamespaceRate, cfg.NamespaceBurst)
	s.nsBytes = newRateLimiter[string](cfg.NamespaceBytesRate, cfg.NamespaceBytesBurst)
	s.refusal = newRateLimiter[string](cfg.RefusalRate, int(cfg.RefusalRate))
	s.gate.init()
	s.levels.init(cfg.ProtocolLevel)
	s.refusals = newRefusalPacer(cfg.AuditRefusalInterval, s.log.Named("audit"))
	s.callAudit = &auditor{s: s, log: s.log.Named("audit"), admin: cfg.IsAdmin}
	return s
}

// Apply is the raft adapter's sink: it runs on raft's FSM goroutine after
// every applied entry, in log order.
func (s *Server) Apply(index uint64, ap fsm.Applied) {
	if ap.Result.Status == fsm.StatusOpened && !ap.Result.Duplicate && ap.Result.Err == nil {
		if info, ok := s.m.Session(ap.Result.Session); ok {
			s.live.Opened(info.ID, time.Duration(info.TTL))
		}
	}
	for _, e := range ap.Events {
		if e.Kind == fsm.EventSessionEnded {
			s.live.Ended(e.Session)
		}
	}
	if ap.Move != nil {
		s.applyMove(ap.Move)
	}
	s.hub.publish(index, ap)
}

// applyMove keeps session liveness and streams right across a move of
// slots (groups.md §8.2), after the machine applied the entry. Group 0 of
// a cluster of one group never gets here.
//
//   - Freeze (source): this group serves the slots' sessions no more. Their
//     deadlines go (its leader must not propose their expiry, which the
//     machine would refuse anyway, nor hold them against a later leader
//     of the target), and their streams here end MOVING at once, so that
//     their clients re-attach to the group that will serve them. The
//     acknowledgements stop by the ownership checks of Touch and of the
//     stream's heartbeats, which come after the confirmation (I3).
//   - Import (target) and Unfreeze (source, an aborted move): the group
//     serves the sessions from this entry on, and its leader arms each
//     with a full Expiry(TTL) from now, as a new leader does (rule 2);
//     a follower ignores it.
//   - Drop: the sessions went at the Freeze; nothing is left to do.
//
// The sessions are read once the entry's batch is applied (raft's sink
// runs after ApplyAll): a later entry of the batch may have ended some,
// whose end then comes in its own Applied, or, for a Drop in the same
// batch as its Freeze, all of them. Then their streams end at their next
// heartbeat (the ownership check) and a deadline left behind proposes an
// expiry the machine answers as a no-op, once.
func (s *Server) applyMove(mv *fsm.MoveApplied) {
	switch mv.Kind {
	case fsm.MoveFreeze:
		ss := s.m.SlotSessions(mv.Slots)
		ids := make([]uint64, len(ss))
		for i, x := range ss {
			ids[i] = x.ID
			s.live.Ended(x.ID)
		}
		n := s.hub.moving(ids)
		s.log.Info("slots frozen: their sessions are no longer renewed here, their streams end MOVING", "slots", len(mv.Slots), "epoch", mv.Epoch, "to", mv.To, "sessions", len(ids), "streams", n)
	case fsm.MoveImport, fsm.MoveUnfreeze:
		ss := s.m.SlotSessions(mv.Slots)
		for _, x := range ss {
			s.live.Opened(x.ID, time.Duration(x.TTL))
		}
		s.log.Info("slots served from now: their sessions armed with a full TTL", "move", mv.Kind.String(), "slots", len(mv.Slots), "epoch", mv.Epoch, "sessions", len(ss))
	}
}

// served is session liveness's Config.Served: the session is open in the
// applied state and in a slot this group serves (a move's Import applied
// here, whose arming in applyMove may not have run yet).
func (s *Server) served(id uint64) (time.Duration, bool) {
	info, ok := s.m.Session(id)
	if !ok || s.m.OwnsSession(id) != nil {
		return 0, false
	}
	return time.Duration(info.TTL), true
}

// History is the watch history this server streams watches from (Config.History).
func (s *Server) History() *watchhist.History { return s.hist }

// Register registers the Locks and Cluster services on g.
func (s *Server) Register(g *grpc.Server) {
	pb.RegisterLocksServer(g, s)
	pb.RegisterClusterServer(g, s)
}

// Run drives the node's leader-side work until ctx ends: session liveness
// (deadlines and the heartbeat batcher), leadership changes and the node's
// own record in the member directory. node must use this Server's Apply as
// its FSM sink.
func (s *Server) Run(ctx context.Context, node Replica) {
	s.node.Store(&replicaCell{node})
	var wg sync.WaitGroup
	wg.Add(6)
	go func() { defer wg.Done(); s.live.Run(ctx) }()
	go func() { defer wg.Done(); s.refusals.run(ctx, s.cfg.Now) }()
	go func() { defer wg.Done(); s.followLeadership(ctx) }()
	go func() {
		defer wg.Done()
		if s.cfg.Group == 0 { // the directory is group 0's
			s.members.register(ctx)
		}
	}()
	go func() {
		defer wg.Done()
		// Group 0's leader probes the members (Members, the cluster
		// level). A group g ≥ 1 of a cluster this release bootstrapped
		// counts its members at the level its state uses once it serves
		// a slot (levelFloor), which is this release's: probes of its own
		// would only repeat group 0's, G times a second per member.
		if s.cfg.Group == 0 {
			s.probeMembers(ctx)
		}
	}()
	go func() { defer wg.Done(); s.watchLeaderless(ctx) }()
	wg.Wait()
	close(s.done)
	s.peers.close()
}

// propose stamps cmd with this node's clock, appends it to the log and
// returns the machine's answer and the entry's logical index (groups.md
// §6.4: what a client sees as an index; the raw Raft index stays
// internal). With one group the two are equal. The offset is read once
// the entry is applied, so an Import applied meanwhile (phase 2) would
// make the index larger than the entry's own logical one, never smaller:
// still at most this node's logical applied index, which is all a client
// does with it (min_index). Phase 2 may have fsm.Applied carry the
// entry's own logical index instead.
func (s *Server) propose(ctx context.Context, cmd fsm.Command) (fsm.Applied, uint64, error) {
	node := s.replica()
	if node == nil {
		return fsm.Applied{}, 0, raftnode.ErrShutdown
	}
	if err := s.gateLevel(cmd); err != nil { // level.go
		return fsm.Applied{}, 0, err
	}
	return s.proposeUngated(ctx, node, cmd)
}

// proposeUngated is propose past the level gate (spread.go's ProposeMove
// shares it).
func (s *Server) proposeUngated(ctx context.Context, node Replica, cmd fsm.Command) (fsm.Applied, uint64, error) {
	data, err := fsm.EncodeEntry(fsm.Entry{Time: s.cfg.Now().UnixNano(), Cmd: cmd})
	if err != nil {
		return fsm.Applied{}, 0, err
	}
	r, err := node.Propose(ctx, data)
	if err != nil {
		return fsm.Applied{}, 0, err
	}
	ap, ok := r.Response.(fsm.Applied)
	if !ok {
		return fsm.Applied{}, 0, fmt.Errorf("internal error: entry %d applied with response %T", r.Index, r.Response)
	}
	return ap, s.m.Logical(r.Index), nil
}

// expirer lets session liveness propose ExpireSession.
type expirer struct{ s *Server }

func (e expirer) Expire(ctx context.Context, id uint64) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := e.s.cfg.Now()
	ap, _, err := e.s.propose(ctx, &fsm.ExpireSession{Session: id})
	if err != nil {
		return err
	}
	e.s.cfg.Observer.Freed(start, ap)
	return ap.Result.Err
}

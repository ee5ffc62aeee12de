package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/lockcluster/lockcluster/internal/watchhist"
	"math"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/spf13/cobra"

	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/auth"
	"github.com/lockcluster/lockcluster/internal/node"
	"github.com/lockcluster/lockcluster/internal/server"
	"github.com/lockcluster/lockcluster/internal/version"
	"github.com/lockcluster/lockcluster/raftnode"
)

type serveConfig struct {
	id, dataDir, grpcAddr, raftAddr, httpAddr string
	advGRPC, advRaft, advHTTP                 string
	bootstrap, join, logLevel, raftDial       string
	bootstrapCheck                            string // bootstrapcheck.go
	joinVoter                                 bool
	logFormat                                 string
	auditRefusalInterval                      time.Duration
	heartbeat, election, lease                time.Duration
	checkpointEvery                           time.Duration
	logStore                                  string
	checkpointEntries                         int64
	tls                                       node.TLSFiles
	maxMessage                                int64
	groups                                    int64
	pprof                                     bool
	blockProfileRate, mutexProfileFraction    int64
	memoryLimit                               string
	gcHeadroom                                string
	sessionRate                               float64
	sessionBurst                              int64
	namespaceRate                             float64
	refusalRate                               float64
	namespaceBurst                            int64
	namespaceBytesRate, namespaceBytesBurst   int64
	streamBacklog                             int64
	streamsPerSession, streamsPerConn         int64 // streams.go
	connsPerIP                                int64
	connIdle                                  time.Duration
	watchHistory                              int64
	limits                                    limitSettings
	auth                                      auth.Config // from the file's auth section only
	tlsWatch                                  time.Duration
	// For a reload (reload.go): the config file, the flags given at start,
	// and GOMEMLIMIT's value (or none) before memory-limit changed it.
	file         string
	given        map[string]string
	memoryLimit0 int64
}

// limitSettings are the replicated limits (SPEC §10) a node proposes when it
// leads: fsm.Limits in the units an operator writes.
type limitSettings struct {
	nameBytes, scopeNames, pendingPerSession, heldPerSession, sessionsPerNamespace int64
	minTTL, maxTTL                                                                 time.Duration
}

func defaultLimits() limitSettings {
	d := fsm.DefaultLimits()
	return limitSettings{nameBytes: d.MaxNameBytes, scopeNames: d.MaxScopeNames, pendingPerSession: d.MaxPendingPerSession,
		heldPerSession: d.MaxHeldPerSession, sessionsPerNamespace: d.MaxSessionsPerNamespace, minTTL: time.Duration(d.MinTTL), maxTTL: time.Duration(d.MaxTTL)}
}

func (l limitSettings) fsm() fsm.Limits {
	d := fsm.DefaultLimits()
	d.MaxNameBytes, d.MaxScopeNames, d.MaxPendingPerSession, d.MaxHeldPerSession = l.nameBytes, l.scopeNames, l.pendingPerSession, l.heldPerSession
	d.MaxSessionsPerNamespace, d.MinTTL, d.MaxTTL = l.sessionsPerNamespace, int64(l.minTTL), int64(l.maxTTL)
	return d
}

func (c *serveConfig) settings() []setting {
	return []setting{
		{key: "id", usage: "this node's id, unique in the cluster", str: &c.id},
		{key: "data-dir", usage: "directory for the raft log, snapshots and state", str: &c.dataDir},
		{key: "grpc-addr", usage: "client API listen address", str: &c.grpcAddr},
		{key: "raft-addr", usage: "raft listen address", str: &c.raftAddr},
		{key: "http-addr", usage: "HTTP listen address (/livez, /readyz); empty: off", str: &c.httpAddr},
		{key: "advertise-grpc", usage: "client API address other nodes and clients use (default: grpc-addr)", str: &c.advGRPC},
		{key: "advertise-raft", usage: "raft address other nodes use (default: raft-addr)", str: &c.advRaft},
		{key: "advertise-http", usage: "HTTP address shown to others (default: http-addr)", str: &c.advHTTP},
		{key: "bootstrap", usage: "first voters of a NEW cluster, id=raft-host:port,... (this node among them); ignored once the data dir has state", str: &c.bootstrap},
		{key: "groups", usage: "Raft groups of a NEW cluster (1 to 32): the namespaces spread over them, each group with its own leader and log (DataDir/groups/g<g>); every --bootstrap voter must name the same number, and such a cluster takes no joins yet", num: &c.groups},
		{key: "join", usage: "client API address of a member to join through, for a new node", str: &c.join},
		{key: "join-voter", usage: "with join: join as a voter at once, rather than as a learner that the leader promotes to voter once it has caught up (see lockcluster join)", flag: &c.joinVoter},
		{key: "bootstrap-check", usage: "client API addresses of the --bootstrap voters, id=host:port,...: on an empty data directory only the first voter bootstraps, once every other one answers that it has no raft state; a node that finds one with state joins through it (a lost volume never starts a second cluster)", str: &c.bootstrapCheck},
		{key: "heartbeat-timeout", usage: "raft: a follower that hears no leader this long starts an election", dur: &c.heartbeat},
		{key: "election-timeout", usage: "raft: a candidate that has not won this long tries again", dur: &c.election},
		{key: "leader-lease-timeout", usage: "raft: a leader that cannot reach a quorum this long steps down", dur: &c.lease},
		{key: "log-store", usage: "the raft log: wal (raft-wal, one fsync per append; a data directory with a bolt log moves into it once) or bolt (raft.db)", str: &c.logStore},
		{key: "checkpoint-interval", usage: "the leader proposes a checkpoint of its applied-entry hash this often (a replica that differs fences itself)", dur: &c.checkpointEvery},
		{key: "checkpoint-entries", usage: "...or after this many applied entries, whichever comes first", num: &c.checkpointEntries},
		{key: "log-level", usage: "trace, debug, info, warn or error", str: &c.logLevel},
		{key: "log-format", usage: "text, or json: one JSON object per line (@timestamp, @level, @module, @message and the fields)", str: &c.logFormat},
		{key: "audit-refusal-interval", usage: "the audit log writes the first 8 refused credentials of a peer (an IP address) in this interval in full, then one line at its end with how many more there were", dur: &c.auditRefusalInterval},
		{key: "tls-cert", usage: "this node's certificate (PEM): serve the client API, raft and HTTP over TLS", str: &c.tls.Cert},
		{key: "tls-key", usage: "this node's private key (PEM)", str: &c.tls.Key},
		{key: "tls-ca", usage: "the CA that signs nodes' and clients' certificates; raft peers must present one", str: &c.tls.CA},
		{key: "tls-client-auth", usage: "client certificates on the client API: none, verify-if-given (default with a CA) or require", str: &c.tls.ClientAuth},
		{key: "tls-watch-interval", usage: "check the tls-cert, tls-key and tls-ca files this often and load them again when they changed, as a SIGHUP does (0: only on SIGHUP)", dur: &c.tlsWatch},
		{key: "max-message-bytes", usage: "largest gRPC message accepted", num: &c.maxMessage},
		{key: "session-rate", usage: "writes per second one session may make through this node (0: no limit)", float: &c.sessionRate},
		{key: "session-burst", usage: "writes a session may make at once above session-rate", num: &c.sessionBurst},
		{key: "namespace-rate", usage: "writes per second one namespace may put in the log, checked by the node a client calls and by the leader (0: no limit)", float: &c.namespaceRate},
		{key: "namespace-burst", usage: "writes a namespace may make at once above namespace-rate", num: &c.namespaceBurst},
		{key: "namespace-bytes-rate", usage: "bytes of log entries per second one namespace may put in the log (a request of 64 names of 1 KiB is 64 KiB), checked by the node a client calls and by the leader (0: no limit)", num: &c.namespaceBytesRate},
		{key: "namespace-bytes-burst", usage: "bytes of log entries a namespace may write at once above namespace-bytes-rate", num: &c.namespaceBytesBurst},
		{key: "refusal-rate", usage: "refusals over a limit one namespace gets at once per second on this node; further ones wait (up to 1s) before they are answered (0: no pacing)", float: &c.refusalRate},
		{key: "stream-backlog-bytes", usage: "bytes of events a session stream may fall behind before it is cut (its client resynchronises)", num: &c.streamBacklog},
		{key: "max-streams-per-session", usage: "session streams one session may have attached to this node; an attach past it ends the session's oldest stream here (0: no limit)", num: &c.streamsPerSession},
		{key: "max-concurrent-streams", usage: "calls and streams one client connection may have open at once; a client's further ones wait (0: no limit)", num: &c.streamsPerConn},
		{key: "max-conns-per-ip", usage: "client API connections open from one IP address; further ones are closed at once and counted in lockcluster_api_connections_refused_total (clients behind one NAT or proxy share it; 0: no limit)", num: &c.connsPerIP},
		{key: "conn-idle-timeout", usage: "close a client API connection that has had no call or stream open this long; its client connects again when it next calls (0: never)", dur: &c.connIdle},
		{key: "watch-history", usage: "changes this node keeps for watches to resume from (a watch that resumes from further back, or falls further behind, gets COMPACTED and starts again from a snapshot)", num: &c.watchHistory},
		{key: "limit-name-bytes", usage: "cluster limit: bytes in a lock name", num: &c.limits.nameBytes},
		{key: "limit-scope-names", usage: "cluster limit: names in one request", num: &c.limits.scopeNames},
		{key: "limit-pending-per-session", usage: "cluster limit: queued requests of one session", num: &c.limits.pendingPerSession},
		{key: "limit-held-per-session", usage: "cluster limit: locks one session holds and waits for", num: &c.limits.heldPerSession},
		{key: "limit-sessions-per-namespace", usage: "cluster limit: live sessions of one namespace (0: none)", num: &c.limits.sessionsPerNamespace},
		{key: "limit-min-ttl", usage: "cluster limit: shortest session TTL", dur: &c.limits.minTTL},
		{key: "limit-max-ttl", usage: "cluster limit: longest session TTL", dur: &c.limits.maxTTL},
		{key: "memory-limit", usage: "soft limit on the node's memory, like 800MiB or 2GiB: Go's garbage collector works harder as the heap nears it (empty: GOMEMLIMIT, or none)", str: &c.memoryLimit},
		{key: "gc-headroom", usage: "once the live heap is larger, Go's garbage collector lets it grow by at most this much before it collects (GOGC lowered to as little as 25): a node holding a million locks stays near 0.8 GiB instead of 1.2 (0: Go's default, twice the live heap; a GOGC in the environment also turns it off)", str: &c.gcHeadroom},
		{key: "enable-pprof", usage: "serve Go's profiler at /debug/pprof/ on the HTTP address (admin credential required when auth is on)", flag: &c.pprof},
		{key: "block-profile-rate", usage: "with enable-pprof: record in /debug/pprof/block the goroutines blocked for at least this many nanoseconds (runtime.SetBlockProfileRate; 1: every event; 0: off, the default: it costs on every blocking operation)", num: &c.blockProfileRate},
		{key: "mutex-profile-fraction", usage: "with enable-pprof: record in /debug/pprof/mutex 1 in this many mutex contention events (runtime.SetMutexProfileFraction; 0: off, the default)", num: &c.mutexProfileFraction},
		{key: "raft-dial", usage: "dial these raft addresses instead of the members' own, id=host:port,... (routes raft traffic through a proxy, as the chaos tests do)", str: &c.raftDial},
	}
}

func defaultServeConfig() *serveConfig {
	host, _ := os.Hostname()
	return &serveConfig{id: host, dataDir: "lockcluster-data", grpcAddr: "127.0.0.1:7700", raftAddr: "127.0.0.1:7701", httpAddr: "127.0.0.1:7702",
		heartbeat: 500 * time.Millisecond, election: 500 * time.Millisecond, lease: 500 * time.Millisecond, logLevel: "info", logFormat: "text",
		checkpointEvery: raftnode.DefaultCheckpointInterval, logStore: raftnode.LogStoreWAL, checkpointEntries: raftnode.DefaultCheckpointEntries,
		maxMessage: 4 << 20, groups: 1, streamBacklog: server.DefaultStreamBacklogBytes, streamsPerSession: server.DefaultMaxStreamsPerSession,
		streamsPerConn: node.DefaultMaxConcurrentStreams, connsPerIP: node.DefaultMaxConnsPerIP, connIdle: node.DefaultConnIdleTimeout, watchHistory: watchhist.DefaultSize, sessionRate: 5000, sessionBurst: 10000, auditRefusalInterval: server.DefaultAuditRefusalInterval,
		namespaceRate: 0, namespaceBurst: 100000, namespaceBytesRate: 8 << 20, namespaceBytesBurst: 16 << 20, refusalRate: 1000, limits: defaultLimits(), gcHeadroom: "256MiB",
		tlsWatch: 5 * time.Second}
}

func newServe() *cobra.Command { return serveCommand(defaultServeConfig()) }

// serveCommand is the serve command, its settings bound to c.
func serveCommand(c *serveConfig) *cobra.Command {
	var file string
	var sample bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run one lockcluster node",
		Long: `Run one lockcluster node.

A new cluster starts from --bootstrap (the same list on every first node); a new
node joins a running cluster with --join. A node whose data directory is empty
and that has neither starts a single-node cluster of its own. A node restarted
on its data directory comes back with its state and ignores both.
With --bootstrap-check (the voters' client API addresses) a node on an empty
data directory bootstraps only if it is the first voter and no voter has raft
state; otherwise it joins: a machine or pod that lost its volume rejoins its
cluster instead of starting a second one.

Exit status: 0 after SIGTERM or SIGINT, 2 for bad settings, 78 when this node
was removed from the cluster (do not restart it on the same data directory),
1 for any other failure. A fenced node (diverged, damaged, disk full) does not
exit: it answers Status and /livez, and /readyz says 503.

Every setting is a flag, a LOCKCLUSTER_* environment variable, or a key of the
YAML file given with --config; a flag beats the environment, which beats the
file. The raft timeouts default to LAN values: an election within about a
second of a leader's failure.

The limit-* settings are the cluster's replicated limits: the leader applies
its own when it takes over, so keep them equal on every node.

Credentials live only in the file, in an auth section:

  auth:
    admin-tokens: ["<32+ random characters>"]   # cluster operations; nodes use the first
    admin-identities: ["node0", "node1"]        # client-certificate names with admin rights
    namespaces:
      billing:
        tokens: ["<token>"]
        identities: ["billing-worker"]         # client-certificate names

Without an auth section any client may use any namespace, and the node says so
in its log.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if sample {
				_, err := os.Stdout.Write(sampleConfig())
				return err
			}
			if file == "" {
				file = os.Getenv("LOCKCLUSTER_CONFIG")
			}
			c.file, c.given = file, flagsGiven(cmd.Flags())
			if err := resolveWith(c.given, c.settings(), file, map[string]any{"auth": &c.auth}); err != nil {
				return &exitError{code: exitUsage, msg: err.Error()}
			}
			return c.run()
		},
	}
	bindFlags(cmd.Flags(), c.settings())
	cmd.Flags().StringVar(&file, "config", "", "YAML config file (env LOCKCLUSTER_CONFIG)")
	cmd.Flags().BoolVar(&sample, "sample-config", false, "print a config file with every setting at its default, and exit")
	return cmd
}

func parsePeers(s string) ([]raftnode.Peer, error) {
	var out []raftnode.Peer
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		id, addr, ok := strings.Cut(p, "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("--bootstrap entry %q is not id=host:port", p)
		}
		out = append(out, raftnode.Peer{ID: id, Addr: addr})
	}
	return out, nil
}

func (c *serveConfig) run() error {
	level := hclog.LevelFromString(c.logLevel)
	if level == hclog.NoLevel {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("--log-level %q is not trace, debug, info, warn or error", c.logLevel)}
	}
	lo := &hclog.LoggerOptions{Name: "lockcluster", Level: level, Output: os.Stderr, Color: hclog.AutoColor}
	switch c.logFormat {
	case "text", "":
	case "json":
		lo.JSONFormat, lo.Color = true, hclog.ColorOff
	default:
		return &exitError{code: exitUsage, msg: fmt.Sprintf("--log-format %q is not text or json", c.logFormat)}
	}
	if os.Getenv("NO_COLOR") != "" {
		lo.Color = hclog.ColorOff
	}
	logger := hclog.New(lo)
	// SIGHUP reloads the settings (reload.go): caught from here on, so that
	// one sent while the node starts waits for it instead of killing it.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	peers, err := parsePeers(c.bootstrap)
	if err != nil {
		return &exitError{code: exitUsage, msg: err.Error()}
	}
	if len(peers) == 0 && c.join == "" {
		peers = []raftnode.Peer{{ID: c.id}}
	}
	// GOMEMLIMIT's, or none: what a reload that clears memory-limit restores.
	c.memoryLimit0 = debug.SetMemoryLimit(-1)
	if err := c.setMemoryLimit(); err != nil {
		return &exitError{code: exitUsage, msg: err.Error()}
	}
	gc := &gcTuner{}
	defer gc.stop()
	if err := gc.set(c.gcHeadroom); err != nil {
		return &exitError{code: exitUsage, msg: err.Error()}
	}
	if err := c.setProfiling(); err != nil {
		return &exitError{code: exitUsage, msg: err.Error()}
	}
	cfg := node.Config{
		ID: c.id, DataDir: c.dataDir, GRPCAddr: c.grpcAddr, RaftAddr: c.raftAddr, HTTPAddr: c.httpAddr,
		AdvertiseGRPC: c.advGRPC, AdvertiseRaft: c.advRaft, AdvertiseHTTP: c.advHTTP,
		Bootstrap: peers, Join: c.join, JoinLearner: !c.joinVoter, Logger: logger,
		MaxMessageBytes: int(c.maxMessage), EnablePprof: c.pprof,
	}
	if c.groups < 1 || c.groups > node.MaxGroups {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("--groups=%d: want 1 to %d", c.groups, node.MaxGroups)}
	}
	cfg.Groups = int(c.groups)
	// What a reload changes too (reload.go).
	if err := c.reloadable(&cfg); err != nil {
		return &exitError{code: exitUsage, msg: err.Error()}
	}
	if c.tlsWatch < 0 {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("--tls-watch-interval=%s: want 0 (off) or a positive duration", c.tlsWatch)}
	}
	cfg.TLSWatchInterval = c.tlsWatch
	cfg.Server.SessionRate, cfg.Server.SessionBurst = c.sessionRate, int(c.sessionBurst)
	if c.streamBacklog <= 0 || c.streamBacklog > math.MaxInt32 {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("--stream-backlog-bytes=%d: want a positive size under 2 GiB", c.streamBacklog)}
	}
	cfg.Server.StreamBacklogBytes = int(c.streamBacklog)
	if c.watchHistory <= 0 || c.watchHistory > math.MaxInt32 {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("--watch-history=%d: want a positive number of changes under 2^31", c.watchHistory)}
	}
	cfg.Server.WatchHistory = int(c.watchHistory)
	if err := c.streamLimits(&cfg); err != nil {
		return err
	}
	if c.join != "" {
		cfg.Bootstrap = nil
	}
	if c.bootstrapCheck != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		cfg.Bootstrap, cfg.Join, err = c.checkBootstrap(ctx, logger, peers)
		stop()
		if errors.Is(err, errStopped) {
			return nil
		} else if err != nil {
			return err
		}
	}
	cfg.Raft.HeartbeatTimeout, cfg.Raft.ElectionTimeout, cfg.Raft.LeaderLeaseTimeout = c.heartbeat, c.election, c.lease
	if c.checkpointEvery <= 0 || c.checkpointEntries <= 0 {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("--checkpoint-interval=%s --checkpoint-entries=%d: both must be positive", c.checkpointEvery, c.checkpointEntries)}
	}
	cfg.Raft.CheckpointInterval, cfg.Raft.CheckpointEntries = c.checkpointEvery, uint64(c.checkpointEntries)
	if c.logStore != raftnode.LogStoreWAL && c.logStore != raftnode.LogStoreBolt {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("--log-store %q: want %s or %s", c.logStore, raftnode.LogStoreWAL, raftnode.LogStoreBolt)}
	}
	cfg.Raft.LogStore = c.logStore
	if c.raftDial != "" {
		dial, err := parsePeers(c.raftDial)
		if err != nil {
			return &exitError{code: exitUsage, msg: strings.Replace(err.Error(), "--bootstrap", "--raft-dial", 1)}
		}
		cfg.Raft.AddressProvider = dialOverride(dial)
	}
	b := version.Current()
	logger.Info("starting", "version", b.Version, "revision", b.Revision, "go", b.GoVersion)
	n, err := node.Start(cfg)
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	removed := false
wait:
	for {
		select {
		case s := <-sig:
			logger.Info("stopping", "signal", s.String())
			break wait
		case <-hup:
			c.reload(n, cfg, logger, gc) // reload.go
		case <-n.Removed():
			removed = true
			break wait
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err = n.Close(ctx)
	if removed {
		return &exitError{code: exitRemoved, msg: "this node was removed from the cluster (lockcluster leave); clear its data directory to join it again"}
	}
	return err
}

// dialOverride maps server ids to the addresses to dial instead of theirs.
type dialOverride []raftnode.Peer

func (d dialOverride) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	for _, p := range d {
		if p.ID == string(id) {
			return raft.ServerAddress(p.Addr), nil
		}
	}
	return "", fmt.Errorf("no --raft-dial address for %s", id)
}

// parseBytes reads a size: a whole number of bytes, or one with a unit
// (KiB, MiB, GiB, TiB, or KB, MB, GB, TB in powers of 1000).
func parseBytes(v string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	num, mult := strings.TrimSpace(v), int64(1)
	for _, u := range units {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is not a size like 800MiB or 2GiB", v)
	}
	return n * mult, nil
}

// setProfiling turns on the block and mutex profiles that --enable-pprof
// serves (process-wide settings of the runtime; both off by default, as
// Go has them: /debug/pprof/block and /mutex are then empty).
func (c *serveConfig) setProfiling() error {
	if c.blockProfileRate < 0 || c.mutexProfileFraction < 0 || c.mutexProfileFraction > math.MaxInt32 {
		return fmt.Errorf("--block-profile-rate=%d --mutex-profile-fraction=%d: want 0 (off) or a positive number", c.blockProfileRate, c.mutexProfileFraction)
	}
	if (c.blockProfileRate > 0 || c.mutexProfileFraction > 0) && !c.pprof {
		return fmt.Errorf("--block-profile-rate=%d --mutex-profile-fraction=%d: the profiles are served by --enable-pprof, which is off", c.blockProfileRate, c.mutexProfileFraction)
	}
	if c.blockProfileRate > 0 {
		runtime.SetBlockProfileRate(int(c.blockProfileRate))
	}
	if c.mutexProfileFraction > 0 {
		runtime.SetMutexProfileFraction(int(c.mutexProfileFraction))
	}
	return nil
}

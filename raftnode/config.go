package raftnode

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
)

// Defaults applied by New to zero-valued Config fields. The timeouts are
// tuned for a LAN (per the project's ECOSYSTEM.md, elections take about 1 s
// instead of about 2 s with raft's own defaults).
const (
	defaultHeartbeatTimeout   = 500 * time.Millisecond
	defaultElectionTimeout    = 500 * time.Millisecond
	defaultLeaderLeaseTimeout = 500 * time.Millisecond
	defaultCommitTimeout      = 50 * time.Millisecond
	defaultMaxAppendEntries   = 256
	defaultMaxRPCsInFlight    = 1
	defaultSnapshotThreshold  = 16384
	defaultSnapshotInterval   = 30 * time.Second
	defaultTrailingLogs       = 10240
	DefaultCheckpointEntries  = 4096
	DefaultCheckpointInterval = 5 * time.Second

	// defaultTimeout bounds Propose, ReadBarrier and membership calls whose
	// context has no deadline.
	defaultTimeout = 10 * time.Second
)

// Peer is one voter of the initial cluster configuration.
type Peer struct {
	ID string
	// Addr is the peer's raft address. For the local node it may be empty,
	// meaning the transport's advertised address.
	Addr string
}

// Config configures a Node. Zero values mean the documented default.
type Config struct {
	// ID is this server's stable raft ID. Required.
	ID string
	// DataDir holds raft.db (the stable store; the log too with
	// LogStoreBolt), wal/ (the log with LogStoreWAL), snapshots/ and LOCK.
	// Required.
	DataDir string
	// LogStore is LogStoreWAL (default) or LogStoreBolt. A data directory
	// whose log is in raft.db moves it into the WAL once at start; a
	// directory with a WAL stays with it.
	LogStore string
	// WALSegmentSize caps the size of the raft-wal log's segments (each is
	// preallocated): 0 is raft-wal's 64 MiB. Groups other than a cluster's
	// first use 8 MiB (groups.md §4.1). A disk with little free space
	// gets smaller segments still (diskguard.go). At least 1 MiB.
	WALSegmentSize int
	// WALMetricLabels label the raft-wal metrics this node reports
	// (lockcluster_raft_wal_*), so that the logs of several groups in one
	// process can be told apart; none by default.
	WALMetricLabels map[string]string
	// BindAddr is the raft TCP listen address, e.g. "127.0.0.1:7701", or
	// "127.0.0.1:0" to let the OS pick a port (tests). Required unless
	// StreamLayer is set.
	BindAddr string
	// AdvertiseAddr is the address other servers dial to reach this one.
	// Default: the transport's actual listen address. Required when BindAddr
	// is a wildcard address such as "0.0.0.0:7701".
	AdvertiseAddr string

	// Bootstrap is the initial set of voters, which must include this node.
	// It is used only when DataDir holds no raft state; a node with no state
	// and no Bootstrap waits to be joined (see Node.Join).
	Bootstrap []Peer
	// BootstrapStamp, when not 0, is stored with the state of a cluster
	// this node bootstraps (Bootstrap, no raft state yet), and read back by
	// Node.BootstrapStamp for as long as the data directory lives. The
	// caller says what it means: lockcluster stores the protocol level
	// that created the cluster (internal/server/level.go).
	BootstrapStamp uint64

	// HeartbeatTimeout: a follower that hears nothing from the leader for
	// this long starts an election. Default 500ms (raft: 1s).
	HeartbeatTimeout time.Duration
	// ElectionTimeout: a candidate that has not won within this long starts
	// a new election. Default 500ms (raft: 1s).
	ElectionTimeout time.Duration
	// LeaderLeaseTimeout: a leader that cannot reach a quorum for this long
	// steps down. Must not exceed HeartbeatTimeout. Default 500ms (raft's):
	// with 250ms, a leader on a machine whose CPUs were saturated (100,000
	// sessions being opened on 2 cores) stepped down when a follower's reply
	// took 275-310ms, and each step-down cost every session's heartbeats a
	// second or more. The lease does not slow failover after a crash: the
	// followers' HeartbeatTimeout does.
	LeaderLeaseTimeout time.Duration
	// commitTimeout: the longest the leader waits before sending a heartbeat
	// carrying the commit index. Default 50ms (raft's default).
	commitTimeout time.Duration
	// maxAppendEntries: the most entries per AppendEntries RPC, per local
	// disk write, and per FSM batch (max 1024). Default 256 (raft: 64).
	maxAppendEntries int
	// disableBatchApplyCh turns off raft's BatchApplyCh, which is on by
	// default: the apply channel is buffered to maxAppendEntries so that
	// concurrent proposals are group-committed.
	disableBatchApplyCh bool
	// maxRPCsInFlight: replication pipelining depth. Default 1, which
	// disables pipelining: under heavy load pipelined replication can stall
	// a follower silently (hashicorp/raft issue #612).
	maxRPCsInFlight int
	// snapshotThreshold: snapshot after this many new log entries.
	// Default 16384 (Consul's).
	snapshotThreshold uint64
	// snapshotInterval: how often to check snapshotThreshold (randomised
	// between 1x and 2x). Default 30s (Consul's; raft's is 120s). A log
	// that is compacted soon stays small: at 4,000 writes/s, raft's 120s
	// let the bbolt file grow to 335 MiB between snapshots, and its pages
	// stayed resident (file-backed RSS) after the compaction read them.
	snapshotInterval time.Duration
	// trailingLogs: log entries kept after a snapshot so that a slightly
	// lagging follower can catch up without a snapshot. Default 10240
	// (raft's default).
	trailingLogs uint64

	// CheckpointEntries and CheckpointInterval: the leader proposes a
	// checkpoint of its applied-entry hash after this many applied entries
	// or this long, whichever comes first, when anything was applied since
	// the last one (checkpoint.go). Defaults 4096 and 5s.
	CheckpointEntries  uint64
	CheckpointInterval time.Duration

	// Logger receives all logs of the node, raft and its transport.
	// Default: an hclog logger named "raftnode" writing to stderr.
	Logger hclog.Logger

	// StreamLayer, if set, replaces the plain TCP listener and dialer (e.g.
	// for TLS). BindAddr is then ignored; the layer's Addr() is advertised
	// unless AdvertiseAddr is set.
	StreamLayer raft.StreamLayer
	// AddressProvider, if set, maps a server ID to the address to dial,
	// overriding the address in the configuration (chaos tests use it to
	// route traffic through a fault-injecting proxy).
	AddressProvider raft.ServerAddressProvider
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	setDur := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	setDur(&c.HeartbeatTimeout, defaultHeartbeatTimeout)
	setDur(&c.ElectionTimeout, defaultElectionTimeout)
	setDur(&c.LeaderLeaseTimeout, defaultLeaderLeaseTimeout)
	setDur(&c.commitTimeout, defaultCommitTimeout)
	setDur(&c.snapshotInterval, defaultSnapshotInterval)
	setDur(&c.CheckpointInterval, DefaultCheckpointInterval)
	if c.CheckpointEntries == 0 {
		c.CheckpointEntries = DefaultCheckpointEntries
	}
	if c.maxAppendEntries == 0 {
		c.maxAppendEntries = defaultMaxAppendEntries
	}
	if c.maxRPCsInFlight == 0 {
		c.maxRPCsInFlight = defaultMaxRPCsInFlight
	}
	if c.snapshotThreshold == 0 {
		c.snapshotThreshold = defaultSnapshotThreshold
	}
	if c.trailingLogs == 0 {
		c.trailingLogs = defaultTrailingLogs
	}
	if c.Logger == nil {
		c.Logger = hclog.New(&hclog.LoggerOptions{Name: "raftnode"})
	}
	return c
}

// Validate reports the first invalid field, naming it and its value.
// Zero values are valid: they mean the default.
func (c Config) validate() error {
	bad := func(field string, value any, why string) error {
		return fmt.Errorf("raftnode: invalid config: %s=%q: %s", field, fmt.Sprint(value), why)
	}
	if c.ID == "" {
		return bad("ID", c.ID, "required")
	}
	if c.DataDir == "" {
		return bad("DataDir", c.DataDir, "required")
	}
	if c.LogStore != "" && c.LogStore != LogStoreWAL && c.LogStore != LogStoreBolt {
		return bad("LogStore", c.LogStore, "want "+LogStoreWAL+" or "+LogStoreBolt)
	}
	if c.WALSegmentSize != 0 && (c.WALSegmentSize < minSegmentSize || c.WALSegmentSize > wal.DefaultSegmentSize) {
		return bad("WALSegmentSize", strconv.Itoa(c.WALSegmentSize), fmt.Sprintf("want 0 (the default) or %d to %d bytes", minSegmentSize, wal.DefaultSegmentSize))
	}
	if c.StreamLayer == nil {
		if c.BindAddr == "" {
			return bad("BindAddr", c.BindAddr, "required unless StreamLayer is set")
		}
		host, _, err := net.SplitHostPort(c.BindAddr)
		if err != nil {
			return bad("BindAddr", c.BindAddr, err.Error())
		}
		if ip := net.ParseIP(host); c.AdvertiseAddr == "" && (host == "" || ip != nil && ip.IsUnspecified()) {
			return bad("AdvertiseAddr", c.AdvertiseAddr, "required when BindAddr "+c.BindAddr+" is a wildcard address")
		}
	}
	if c.AdvertiseAddr != "" {
		if _, err := net.ResolveTCPAddr("tcp", c.AdvertiseAddr); err != nil {
			return bad("AdvertiseAddr", c.AdvertiseAddr, err.Error())
		}
	}
	if err := validatePeers(c.ID, c.Bootstrap); err != nil {
		return err
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"HeartbeatTimeout", c.HeartbeatTimeout}, {"ElectionTimeout", c.ElectionTimeout},
		{"LeaderLeaseTimeout", c.LeaderLeaseTimeout}, {"CommitTimeout", c.commitTimeout},
		{"SnapshotInterval", c.snapshotInterval}, {"CheckpointInterval", c.CheckpointInterval},
	} {
		if d.v < 0 {
			return bad(d.name, d.v, "must not be negative")
		}
	}
	if c.maxAppendEntries < 0 || c.maxAppendEntries > 1024 {
		return bad("MaxAppendEntries", c.maxAppendEntries, "must be between 1 and 1024")
	}
	if c.maxRPCsInFlight < 0 {
		return bad("MaxRPCsInFlight", c.maxRPCsInFlight, "must not be negative")
	}
	// Cross-field rules (lease <= heartbeat <= election) are raft's own.
	d := c.withDefaults()
	if err := raft.ValidateConfig(d.raftConfig(nil)); err != nil {
		return fmt.Errorf("raftnode: invalid config (after defaults: HeartbeatTimeout=%s ElectionTimeout=%s LeaderLeaseTimeout=%s): %w",
			d.HeartbeatTimeout, d.ElectionTimeout, d.LeaderLeaseTimeout, err)
	}
	return nil
}

// validatePeers checks a bootstrap configuration: non-empty, unique IDs and
// addresses, and the local node among them. Only the local node may omit
// its address.
func validatePeers(self string, peers []Peer) error {
	if len(peers) == 0 {
		return nil
	}
	ids := map[string]bool{}
	addrs := map[string]bool{}
	for i, p := range peers {
		field := fmt.Sprintf("Bootstrap[%d]", i)
		switch {
		case p.ID == "":
			return fmt.Errorf("raftnode: invalid config: %s.ID=%q: required", field, p.ID)
		case ids[p.ID]:
			return fmt.Errorf("raftnode: invalid config: %s.ID=%q: duplicate", field, p.ID)
		case p.Addr == "" && p.ID != self:
			return fmt.Errorf("raftnode: invalid config: %s.Addr=%q: required for peer %q", field, p.Addr, p.ID)
		case p.Addr != "" && addrs[p.Addr]:
			return fmt.Errorf("raftnode: invalid config: %s.Addr=%q: duplicate", field, p.Addr)
		}
		ids[p.ID] = true
		if p.Addr != "" {
			addrs[p.Addr] = true
		}
	}
	if !ids[self] {
		return fmt.Errorf("raftnode: invalid config: Bootstrap=%v: must include this node (ID %q)", peers, self)
	}
	return nil
}

// raftConfig builds raft's configuration from a defaulted Config.
func (c Config) raftConfig(notify chan<- bool) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.ID)
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.CommitTimeout = c.commitTimeout
	rc.MaxAppendEntries = c.maxAppendEntries
	rc.BatchApplyCh = !c.disableBatchApplyCh
	rc.SnapshotThreshold = c.snapshotThreshold
	rc.SnapshotInterval = c.snapshotInterval
	rc.TrailingLogs = c.trailingLogs
	rc.NotifyCh = notify
	if c.Logger != nil {
		rc.Logger = c.Logger.Named("raft")
	}
	return rc
}

package raftnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

const (
	logCacheSize      = 512
	snapshotsRetained = 2
	transportMaxPool  = 3
	transportTimeout  = 10 * time.Second
	boltOpenTimeout   = time.Second
)

// Node is one running Raft member. Its methods are safe for concurrent use.
type Node struct {
	cfg    Config // defaulted
	logger hclog.Logger

	raft      *raft.Raft
	fsm       *trackingFSM
	stores    *stores       // store.go: the stable store, the log, the data directory's lock
	logs      raft.LogStore // the log behind a LogCache, monotonic
	transport *raft.NetworkTransport
	clamp     *clampTransport // transport as raft sees it (clamp.go)

	leadership *broadcaster
	peers      peerWatch      // the leader's heartbeat reports (peers.go)
	wg         sync.WaitGroup // background goroutines of this package

	barrierSem  chan struct{} // single-flights the per-term barrier
	barrierTerm atomic.Uint64 // the latest term whose barrier has been applied

	fences        *fences       // what keeps this node from serving, campaigning, voting (fence.go)
	checkpointsOK atomic.Uint64 // checkpoints this node verified

	closing      chan struct{} // closed when Shutdown starts
	stopped      chan struct{} // closed once raft has stopped
	shutdownOnce sync.Once
	shutdownErr  error
}

// New opens (or creates) the raft state in cfg.DataDir and starts the
// member. If DataDir holds no raft state and cfg.Bootstrap is set, it
// bootstraps a cluster of exactly those voters; with neither, the node
// waits to be joined. fsm is the replicated state machine; it must start
// empty, since raft restores it from the latest snapshot and log.
func New(cfg Config, fsm raft.FSM) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if fsm == nil {
		return nil, errors.New("raftnode: New: fsm is nil")
	}
	cfg = cfg.withDefaults()
	n := &Node{
		cfg:        cfg,
		logger:     cfg.Logger,
		leadership: newBroadcaster(),
		barrierSem: make(chan struct{}, 1),
		closing:    make(chan struct{}),
		stopped:    make(chan struct{}),
	}
	n.fences = newFences()
	if err := n.open(fsm); err != nil {
		if n.raft != nil {
			n.stopRaft()
		}
		n.closeResources()
		return nil, err
	}
	n.watchFences() // the storage and behind fences (diskguard.go, behind.go)
	return n, nil
}

// open builds the stores, the transport and raft, then bootstraps if asked.
// On error the caller closes whatever was opened.
func (n *Node) open(fsm raft.FSM) error {
	cfg := n.cfg
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("raftnode: data dir: %w", err)
	}
	st, err := openStores(cfg.DataDir, cfg.LogStore, cfg.walOptions(), n.logger)
	if err != nil {
		return err
	}
	n.stores = st
	n.logs = st.logs
	store := st.checked
	if err := n.checkStores(); err != nil {
		return err
	}
	snapsBase := filepath.Join(cfg.DataDir, "snapshots")
	fileSnaps, err := raft.NewFileSnapshotStoreWithLogger(snapsBase, snapshotsRetained, n.logger.Named("snapshots"))
	if err != nil {
		return fmt.Errorf("raftnode: snapshot store: %w", err)
	}
	// meta.sum written and verified for every snapshot (snapsum.go).
	snaps := trackingSnapshots{newCheckedSnapshots(fileSnaps, snapsBase, n.logger.Named("snapshots"))}
	if n.transport, err = n.newTransport(); err != nil {
		return err
	}
	hasState, err := raft.HasExistingState(n.logs, store, snaps)
	if err != nil {
		return fmt.Errorf("raftnode: reading raft state: %w", err)
	}
	n.clamp = newClampTransport(n.transport, n.fences)
	// Bootstrap writes the first configuration into the stores before raft
	// starts consuming RPCs. Bootstrapping after NewRaft (Raft.BootstrapCluster)
	// lost a race: a peer that bootstrapped first could reach this node's
	// listener between the two, its AppendEntries created raft state, and the
	// bootstrap failed with "bootstrap only works on new clusters". Requests
	// that arrive now wait in the transport until raft reads them.
	switch {
	case hasState && len(cfg.Bootstrap) > 0:
		n.logger.Debug("existing raft state found; ignoring Bootstrap")
	case !hasState && len(cfg.Bootstrap) > 0 && n.Damaged() != nil:
		// Its state was dropped as damaged: bootstrapping would start a
		// second cluster. It waits for the leader instead.
		n.logger.Error("not bootstrapping: this node's stores were damaged; it waits to be repaired by the cluster's leader")
	case !hasState && len(cfg.Bootstrap) > 0:
		conf, err := n.bootstrapConfiguration(cfg.Bootstrap)
		if err != nil {
			return err
		}
		if err := raft.BootstrapCluster(cfg.raftConfig(nil), n.logs, store, snaps, n.clamp, conf); err != nil {
			return fmt.Errorf("raftnode: bootstrap: %w", err)
		}
		if err := n.stamp(); err != nil {
			return err
		}
		n.logger.Info("bootstrapped cluster", "servers", conf.Servers)
	case !hasState:
		n.logger.Info("no raft state and no Bootstrap: waiting to be joined")
	}

	n.loadDiverged()
	n.fsm = newTrackingFSM(fsm, n.logger)
	n.fsm.onCheckpoint = n.checkpointed
	plantID := cfg.ID // a group g ≥ 1's replica is ID/g (WALMetricLabels)
	if g := cfg.WALMetricLabels["group"]; g != "" {
		plantID += "/" + g
	}
	n.fsm.chain.plant = plantDivergence(plantID, n.logger)
	// raft blocks on NotifyCh; watchLeadership drains it until raft stops.
	notify := make(chan bool, 16)
	n.raft, err = raft.NewRaft(cfg.raftConfig(notify), n.fsm, n.logs, store, snaps, n.clamp)
	if err != nil {
		return fmt.Errorf("raftnode: start raft: %w", err)
	}
	n.wg.Add(4)
	go n.watchLeadership(notify)
	go n.runCheckpoints()
	go n.watchPeers()
	go n.runRepair()

	n.logger.Info("raft node started", "id", cfg.ID, "addr", n.transport.LocalAddr(),
		"existing_state", hasState, "last_index", n.raft.LastIndex())
	return nil
}

// newTransport creates the NetworkTransport: plain TCP on BindAddr, or
// cfg.StreamLayer. maxRPCsInFlight and the AddressProvider are options of
// NetworkTransportConfig, so both paths go through it.
func (n *Node) newTransport() (*raft.NetworkTransport, error) {
	cfg := n.cfg
	tc := &raft.NetworkTransportConfig{
		ServerAddressProvider: cfg.AddressProvider,
		Logger:                n.logger.Named("raft-net"),
		MaxPool:               transportMaxPool,
		MaxRPCsInFlight:       cfg.maxRPCsInFlight,
		Timeout:               transportTimeout,
	}
	// The advertised address is kept as written: a host name stays a host
	// name, resolved at each dial, so a peer that comes back with another IP
	// (a container) is still found.
	var advertise net.Addr
	if cfg.AdvertiseAddr != "" {
		if _, _, err := net.SplitHostPort(cfg.AdvertiseAddr); err != nil {
			return nil, fmt.Errorf("raftnode: AdvertiseAddr %q: %w", cfg.AdvertiseAddr, err)
		}
		advertise = hostAddr(cfg.AdvertiseAddr)
	}
	if cfg.StreamLayer != nil {
		tc.Stream = cfg.StreamLayer
		if advertise != nil {
			tc.Stream = advertisedStream{cfg.StreamLayer, advertise}
		}
		return raft.NewNetworkTransportWithConfig(tc), nil
	}
	l, err := net.Listen("tcp", cfg.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("raftnode: raft transport on %s: %w", cfg.BindAddr, err)
	}
	if advertise == nil {
		if a := l.Addr().(*net.TCPAddr); a.IP.IsUnspecified() {
			l.Close()
			return nil, fmt.Errorf("raftnode: BindAddr %s is a wildcard: set AdvertiseAddr to the address peers dial", cfg.BindAddr)
		}
		advertise = l.Addr()
	}
	tc.Stream = &tcpStream{Listener: l, advertise: advertise}
	return raft.NewNetworkTransportWithConfig(tc), nil
}

// hostAddr is an address as written (host:port), resolved when dialled.
type hostAddr string

func (a hostAddr) Network() string { return "tcp" }
func (a hostAddr) String() string  { return string(a) }

// dialTimeout bounds a dial to a peer. Raft's own timeout (transportTimeout)
// also bounds I/O, which may take longer; a peer that does not answer a
// dial at all (a killed container) must not hold raft up for that long.
const dialTimeout = 2 * time.Second

// tcpStream is raft's plain TCP stream layer, advertising the address as
// configured.
type tcpStream struct {
	net.Listener
	advertise net.Addr
}

func (t *tcpStream) Addr() net.Addr { return t.advertise }

func (t *tcpStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(address), min(timeout, dialTimeout))
}

// advertisedStream overrides the address a StreamLayer advertises.
type advertisedStream struct {
	raft.StreamLayer
	addr net.Addr
}

func (s advertisedStream) Addr() net.Addr { return s.addr }

// Addr returns the raft address this node advertises to its peers.
func (n *Node) Addr() string { return string(n.transport.LocalAddr()) }

// ID returns this node's raft server ID.
func (n *Node) ID() string { return n.cfg.ID }

// bootstrapCluster bootstraps a new cluster whose voters are exactly peers,
// which must include this node (an empty Addr for it means Addr()). It
// fails if the node already has raft state. Config.Bootstrap calls it from
// New; call it directly when the peers' addresses are only known after
// New (e.g. ports chosen by the OS).
func (n *Node) bootstrapCluster(peers []Peer) error {
	conf, err := n.bootstrapConfiguration(peers)
	if err != nil {
		return err
	}
	if err := n.raft.BootstrapCluster(conf).Error(); err != nil {
		return fmt.Errorf("raftnode: bootstrap: %w", err)
	}
	if err := n.stamp(); err != nil {
		return err
	}
	n.logger.Info("bootstrapped cluster", "servers", conf.Servers)
	return nil
}

// bootstrapStampKey is the stable store key of Config.BootstrapStamp.
var bootstrapStampKey = []byte("lockcluster_bootstrap_stamp")

// stamp stores Config.BootstrapStamp after a bootstrap. It is written
// after the bootstrap, not before: a stamp on a node whose bootstrap
// failed, and that is later joined instead, would claim a cluster it did
// not create. A crash between the two leaves no stamp, which its reader
// must take as "unknown".
func (n *Node) stamp() error {
	if n.cfg.BootstrapStamp == 0 {
		return nil
	}
	if err := n.stores.checked.SetUint64(bootstrapStampKey, n.cfg.BootstrapStamp); err != nil {
		return fmt.Errorf("raftnode: bootstrap: storing the bootstrap stamp: %w", err)
	}
	return nil
}

// BootstrapStamp is the Config.BootstrapStamp this node stored when it
// bootstrapped its cluster; 0 when it did not bootstrap it (it was
// joined), bootstrapped with none, or the stamp cannot be read.
func (n *Node) BootstrapStamp() uint64 {
	v, err := n.stores.checked.GetUint64(bootstrapStampKey)
	if err != nil {
		return 0
	}
	return v
}

// bootstrapConfiguration is the raft configuration of exactly peers, all
// voters.
func (n *Node) bootstrapConfiguration(peers []Peer) (raft.Configuration, error) {
	var conf raft.Configuration
	if err := validatePeers(n.cfg.ID, peers); err != nil {
		return conf, err
	}
	for _, p := range peers {
		addr := p.Addr
		if p.ID == n.cfg.ID && addr == "" {
			addr = n.Addr()
		}
		conf.Servers = append(conf.Servers, raft.Server{
			ID: raft.ServerID(p.ID), Address: raft.ServerAddress(addr), Suffrage: raft.Voter,
		})
	}
	return conf, nil
}

// Shutdown stops the node: if it is the leader and there are other voters,
// it first tries to hand leadership over (bounded by ctx and by a few
// election timeouts; skipped if ctx is already done), then stops raft and
// closes the transport and the store. It is idempotent; later calls return
// the first call's result.
func (n *Node) Shutdown(ctx context.Context) error {
	n.shutdownOnce.Do(func() { n.shutdownErr = n.shutdown(ctx) })
	return n.shutdownErr
}

func (n *Node) shutdown(ctx context.Context) error {
	close(n.closing)
	if ctx.Err() == nil && n.raft.State() == raft.Leader && n.otherVoters() > 0 {
		tctx, cancel := context.WithTimeout(ctx, 4*n.cfg.ElectionTimeout+time.Second)
		err := n.transferLeadership(tctx)
		cancel()
		if err != nil {
			n.logger.Warn("leadership transfer before shutdown failed", "error", err)
		}
	}
	err := n.stopRaft()
	if cerr := n.closeResources(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	n.logger.Info("raft node stopped", "id", n.cfg.ID)
	return err
}

// stopRaft stops raft and this package's goroutines, and closes the
// leadership subscriptions.
func (n *Node) stopRaft() error {
	err := n.raft.Shutdown().Error()
	close(n.stopped)
	n.wg.Wait()
	n.leadership.close()
	return err
}

// closeResources closes the transport and the store, whichever are open.
func (n *Node) closeResources() error {
	var errs []error
	if n.clamp != nil {
		errs = append(errs, n.clamp.Close()) // closes n.transport too
	}
	if n.transport != nil {
		n.transport.CloseStreams()
		errs = append(errs, n.transport.Close())
	}
	if n.stores != nil {
		errs = append(errs, n.stores.close())
	}
	return errors.Join(errs...)
}

// otherVoters counts the voters other than this node in the latest
// configuration.
func (n *Node) otherVoters() int {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	count := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != n.cfg.ID {
			count++
		}
	}
	return count
}

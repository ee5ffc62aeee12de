package raftnode

// Offline access to a stopped node's data directory:
//
//   - Recover makes a surviving member a one-node cluster of itself, from
//     its own log and snapshot, after the loss of a majority (etcd's
//     --force-new-cluster, Consul's peers.json): hashicorp/raft's
//     RecoverCluster (api.go) with a configuration of only this node.
//   - ReadState restores a state machine from the directory as raft
//     would at start, and applies the whole log after the snapshot: the
//     state an offline backup is taken from.
//
// Both open the directory as New does (openOffline): the data directory's
// lock (a running node holds it), raft.db's meta pages and the term and
// vote shadow, raft-wal's tail, every log entry's checksum, the
// snapshots' meta.sum and CRC, and the DAMAGED and DIVERGED markers. A
// directory that any of these finds damaged, or that diverged, is refused:
// it is no source for a cluster's state. Damage found now is recorded
// (DataDir/DAMAGED) before the refusal, as New records it, because the
// checks may already have set a corrupt snapshot aside: the next start
// must still know.
//
// Neither knows which entries were committed: hashicorp/raft does not
// persist the commit index (the stable store holds CurrentTerm,
// LastVoteTerm and LastVoteCand only: raft.go, keyCurrentTerm ...), so
// every entry of the log counts. RecoverCluster says so itself ("treats
// every entry in this node's log as committed"); README, Operations,
// says what that means to an operator.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// RecoverConfig names the data directory of a stopped node to recover,
// and the node.
type RecoverConfig struct {
	// DataDir is the node's Config.DataDir. The node must be stopped.
	DataDir string
	// ID is the node's Config.ID; it must be a server of the directory's
	// latest configuration.
	ID string
	// Addr is the raft address the other nodes will dial to reach this one
	// (its AdvertiseAddr, or BindAddr); "" keeps the address the
	// configuration has for it.
	Addr string
	// Logger receives raft's and the checks' logs (default: none).
	Logger hclog.Logger
}

// RecoverResult says what Recover did.
type RecoverResult struct {
	// SnapshotIndex is the index of the snapshot the state was restored
	// from (0: none, the whole log was applied).
	SnapshotIndex uint64
	// Entries is how many log entries after it were applied: every one
	// the log had (RecoverCluster takes them all as committed).
	Entries uint64
	// Index and Term are the last entry's: the new snapshot's, which holds
	// the whole state. The node's next entry is Index+1.
	Index, Term uint64
	// Before is the latest configuration the directory had; After is the
	// new one, this node alone as a voter.
	Before, After []Member
}

// State is what ReadState found.
type State struct {
	// SnapshotIndex and SnapshotTerm are the snapshot the state was
	// restored from (0: none).
	SnapshotIndex, SnapshotTerm uint64
	// Entries is how many log entries after it were applied.
	Entries uint64
	// Index and Term are the last log entry's (the snapshot's when the log
	// has none after it): the state reflects every entry up to Index.
	Index, Term uint64
	// Configuration is the latest configuration the directory holds.
	Configuration []Member
}

// ErrNoState: the directory holds no raft state.
var ErrNoState = errors.New("no raft state")

// offline is a stopped node's data directory, opened with New's checks.
type offline struct {
	n     *Node // only the fields the checks use: cfg, logger, fences, stores
	snaps trackingSnapshots
}

// openOffline opens dir's stores as New does and runs the same checks,
// without a transport or raft. It refuses a directory without raft state
// (it creates nothing there), one that a running node holds, and one that
// is damaged or diverged (what: "recover", "read" — for the messages).
func openOffline(dir string, logger hclog.Logger, what string) (_ *offline, err error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if err := hasRaftState(dir); err != nil {
		return nil, err
	}
	n := &Node{cfg: Config{DataDir: dir}, logger: logger, fences: newFences()}
	kind := LogStoreBolt // the log where it is: never migrated by an offline tool
	if _, err := os.Stat(filepath.Join(dir, "wal")); err == nil {
		kind = LogStoreWAL
	}
	st, err := openStores(dir, kind, walOptions{}, logger) // an existing log: its segments keep their size
	if err != nil {
		var d *storageDamage
		if errors.As(err, &d) {
			// An unreadable LOG-CHECKSUMS: New records nothing either (it
			// does not start), and the next open finds it again.
			return nil, refusal(dir, what, d)
		}
		return nil, err
	}
	n.stores, n.logs = st, st.logs
	o := &offline{n: n}
	defer func() {
		if err != nil {
			o.close()
		}
	}()
	if err := n.checkStores(); err != nil { // records damage (DAMAGED) before it drops anything
		return nil, err
	}
	n.loadDiverged()
	if err := n.Unfit(); err != nil {
		return nil, refusal(dir, what, err)
	}
	base := filepath.Join(dir, "snapshots")
	fileSnaps, err := raft.NewFileSnapshotStoreWithLogger(base, snapshotsRetained, logger.Named("snapshots"))
	if err != nil {
		return nil, fmt.Errorf("raftnode: snapshot store: %w", err)
	}
	o.snaps = trackingSnapshots{newCheckedSnapshots(fileSnaps, base, logger.Named("snapshots"))}
	return o, nil
}

// hasRaftState refuses a directory that a node never used: raft.db is
// the first file a node writes. It names the likely mistake, a directory
// one level off.
func hasRaftState(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "raft.db")); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("raftnode: %w", err)
	}
	hint := ""
	if _, err := os.Stat(filepath.Join(dir, "raft", "raft.db")); err == nil {
		hint = fmt.Sprintf(" (%s has: name that directory)", filepath.Join(dir, "raft"))
	}
	return fmt.Errorf("raftnode: %s holds no raft state: no raft.db%s: %w", dir, hint, ErrNoState)
}

// refusal is the error for a directory that cannot be the source of a
// cluster's state: damaged or diverged. It wraps why (errors.Is ErrDamaged,
// ErrDiverged).
func refusal(dir, what string, why error) error {
	var advice string
	switch {
	case errors.Is(why, ErrDiverged):
		advice = "its state machine applied entries the cluster's leader did not: it cannot be the source of the cluster's state"
	default:
		advice = "it may have lost entries it had acknowledged to a leader: it cannot be the source of the cluster's state"
	}
	return fmt.Errorf("raftnode: refusing to %s %s: %w; %s. Use another surviving member's data directory, or seed a new cluster from the last backup (lockcluster snapshot restore); keep this directory for a bug report",
		what, dir, why, advice)
}

func (o *offline) close() error { return o.n.stores.close() }

// latestConfiguration is the configuration raft would start with: the
// newest snapshot's, or the last configuration entry in the log after it.
func (o *offline) latestConfiguration() (raft.Configuration, error) {
	var conf raft.Configuration
	var at uint64
	list, err := o.snaps.List()
	if err != nil {
		return conf, fmt.Errorf("raftnode: listing the snapshots: %w", err)
	}
	if len(list) > 0 {
		conf, at = list[0].Configuration, list[0].ConfigurationIndex
	}
	first, last, err := logBounds(o.n.logs)
	if err != nil {
		return conf, err
	}
	var l raft.Log
	for i := max(first, at+1); last > 0 && i <= last; i++ {
		if err := o.n.logs.GetLog(i, &l); err != nil {
			return conf, fmt.Errorf("raftnode: reading the log at index %d: %w", i, err)
		}
		if l.Type == raft.LogConfiguration {
			conf = raft.DecodeConfiguration(l.Data)
		}
	}
	return conf, nil
}

func logBounds(logs raft.LogStore) (first, last uint64, err error) {
	if first, err = logs.FirstIndex(); err == nil {
		last, err = logs.LastIndex()
	}
	if err != nil {
		return 0, 0, fmt.Errorf("raftnode: reading the log: %w", err)
	}
	return first, last, nil
}

// configMembers lists conf as Members (no leader: the directory is offline).
func configMembers(conf raft.Configuration) []Member {
	out := make([]Member, 0, len(conf.Servers))
	for _, s := range conf.Servers {
		out = append(out, Member{ID: string(s.ID), Addr: string(s.Address), Suffrage: s.Suffrage.String()})
	}
	return out
}

// Recover makes the stopped node in cfg.DataDir a one-node cluster of
// itself, keeping its whole state: hashicorp/raft's RecoverCluster with a
// configuration of only cfg.ID. It restores fsm (which must start empty,
// as New's) from the latest snapshot, applies every entry of the log after
// it, writes the result as a snapshot whose configuration is this node
// alone, and deletes the log, which that snapshot covers. The node is then
// started as before (New, on the same DataDir; Bootstrap is ignored): it
// elects itself and goes on at the next index, so every new entry's index
// (a lock's fencing token) is above every one in the log.
//
// Every entry of this node's log is taken as committed, including any the
// old majority never committed; and entries the old majority committed
// that this node never received are gone. Use it only when a majority of
// the voters is lost for good, on the survivor with the longest log; the
// other survivors, if any, are wiped and join it.
//
// It refuses a directory that a running node holds (the lock), that holds
// no raft state, that is damaged or diverged (errors.Is ErrDamaged,
// ErrDiverged), or whose configuration does not have cfg.ID.
func Recover(cfg RecoverConfig, fsm raft.FSM) (res RecoverResult, err error) {
	switch {
	case cfg.DataDir == "" || cfg.ID == "":
		return res, errors.New("raftnode: Recover: DataDir and ID are required")
	case fsm == nil:
		return res, errors.New("raftnode: Recover: fsm is nil")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	o, err := openOffline(cfg.DataDir, logger, "recover")
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := o.close(); err == nil && cerr != nil {
			err = fmt.Errorf("raftnode: closing the stores: %w", cerr)
		}
	}()
	before, err := o.latestConfiguration()
	if err != nil {
		return res, err
	}
	res.Before = configMembers(before)
	addr := raft.ServerAddress(cfg.Addr)
	found := false
	var ids []string
	for _, s := range before.Servers {
		ids = append(ids, string(s.ID))
		if string(s.ID) == cfg.ID {
			found = true
			if addr == "" {
				addr = s.Address
			}
		}
	}
	if !found {
		return res, fmt.Errorf("raftnode: refusing to recover %s: its configuration has no server %q (it has %s): give the id this node runs with, or recover another member's directory",
			cfg.DataDir, cfg.ID, strings.Join(ids, ", "))
	}
	if addr == "" {
		return res, fmt.Errorf("raftnode: recover %s: the configuration has no address for %s: give one", cfg.DataDir, cfg.ID)
	}
	conf := raft.Configuration{Servers: []raft.Server{{ID: raft.ServerID(cfg.ID), Address: addr, Suffrage: raft.Voter}}}
	_, last, err := logBounds(o.n.logs)
	if err != nil {
		return res, err
	}
	f := &recoveryFSM{trackingFSM: newTrackingFSM(fsm, logger), logs: o.n.logs, next: 1, last: last}
	rc := Config{ID: cfg.ID, Logger: logger}.withDefaults().raftConfig(nil)
	if err := raft.RecoverCluster(rc, f, o.n.logs, o.n.stores.checked, o.snaps, peerEncoder{}, conf); err != nil {
		return res, fmt.Errorf("raftnode: recover %s: %w", cfg.DataDir, err)
	}
	list, err := o.snaps.List()
	if err != nil || len(list) == 0 {
		return res, fmt.Errorf("raftnode: recover %s: the new snapshot is not listed: %v", cfg.DataDir, err)
	}
	res.SnapshotIndex = f.restoredAt
	res.Index, res.Term = list[0].Index, list[0].Term
	res.Entries = res.Index - res.SnapshotIndex
	res.After = configMembers(list[0].Configuration)
	logger.Info("recovered: a one-node cluster of this node, from its whole log", "id", cfg.ID, "addr", addr,
		"index", res.Index, "term", res.Term, "snapshot_index", res.SnapshotIndex, "entries", res.Entries)
	return res, nil
}

// recoveryFSM is the FSM Recover gives RecoverCluster: trackingFSM (the
// chain of applied-entry hashes, checkpoint entries kept from the user's
// FSM), fed the configuration entries RecoverCluster skips. It applies
// only commands (api.go: "if entry.Type == LogCommand"), where raft
// running hands trackingFSM, a BatchingFSM, configurations too (fsm.go,
// runFSM); without them the snapshot's chain would not be the one the
// node had, and a member that joined again with its old log would be
// fenced as diverged at the first checkpoint.
type recoveryFSM struct {
	*trackingFSM
	logs       raft.LogStore
	next       uint64 // the next index to hand over
	last       uint64 // the log's last index
	restoredAt uint64 // the snapshot restored (0: none)
	err        error
}

func (f *recoveryFSM) Restore(rc io.ReadCloser) error {
	if err := f.trackingFSM.Restore(rc); err != nil {
		return err
	}
	f.restoredAt = f.trackingFSM.Index()
	f.next = f.restoredAt + 1
	return nil
}

func (f *recoveryFSM) Apply(l *raft.Log) any {
	f.configurations(l.Index)
	f.next = l.Index + 1
	return f.trackingFSM.Apply(l)
}

func (f *recoveryFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.configurations(f.last + 1)
	if f.err != nil {
		return nil, f.err
	}
	return f.trackingFSM.Snapshot()
}

// configurations applies the configuration entries from f.next up to,
// not including, index.
func (f *recoveryFSM) configurations(index uint64) {
	for ; f.err == nil && f.next < index; f.next++ {
		var l raft.Log
		if err := f.logs.GetLog(f.next, &l); err != nil {
			f.err = fmt.Errorf("reading the log at index %d: %w", f.next, err)
			return
		}
		if l.Type == raft.LogConfiguration {
			f.trackingFSM.ApplyBatch([]*raft.Log{&l})
		}
	}
}

// replayBatch is how many entries ReadState hands the FSM at once.
const replayBatch = 256

// ReadState restores fsm (which must start empty) from the stopped node
// in dataDir as raft restores a node at start, from the newest snapshot
// that restores, and then applies every command and configuration entry
// of the log after it, as raft would once they were committed. It changes
// nothing in raft's state; the checks at open may make the repairs New
// makes at start (a partial snapshot removed, a snapshot's meta.sum
// written) and record damage they find.
//
// The log's last entries may never have been committed: a node that is
// stopped does not know (raft does not persist the commit index), so the
// state reflects this node's log up to its last entry. It refuses a
// directory that a running node holds, that holds no raft state, or that
// is damaged or diverged.
func ReadState(dataDir string, fsm raft.FSM, logger hclog.Logger) (st State, err error) {
	if dataDir == "" || fsm == nil {
		return st, errors.New("raftnode: ReadState: a data directory and an FSM are required")
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	o, err := openOffline(dataDir, logger, "read")
	if err != nil {
		return st, err
	}
	defer func() {
		if cerr := o.close(); err == nil && cerr != nil {
			err = fmt.Errorf("raftnode: closing the stores: %w", cerr)
		}
	}()
	conf, err := o.latestConfiguration()
	if err != nil {
		return st, err
	}
	st.Configuration = configMembers(conf)
	tf := newTrackingFSM(fsm, logger)
	list, err := o.snaps.List()
	if err != nil {
		return st, fmt.Errorf("raftnode: listing the snapshots: %w", err)
	}
	var failures []string
	for _, meta := range list { // newest first, as NewRaft tries them
		_, rc, err := o.snaps.Open(meta.ID)
		if err == nil {
			err = tf.Restore(rc)
			rc.Close()
		}
		if err != nil {
			logger.Warn("a snapshot does not restore; trying an older one", "snapshot", meta.ID, "error", err)
			failures = append(failures, fmt.Sprintf("%s: %v", meta.ID, err))
			continue
		}
		st.SnapshotIndex, st.SnapshotTerm = meta.Index, meta.Term
		break
	}
	if len(list) > 0 && st.SnapshotIndex == 0 {
		return st, fmt.Errorf("raftnode: no snapshot in %s restores: %s", dataDir, strings.Join(failures, "; "))
	}
	st.Index, st.Term = st.SnapshotIndex, st.SnapshotTerm
	_, last, err := logBounds(o.n.logs)
	if err != nil {
		return st, err
	}
	batch := make([]*raft.Log, 0, replayBatch)
	flush := func() {
		if len(batch) > 0 {
			tf.ApplyBatch(batch)
			batch = batch[:0]
		}
	}
	for i := st.SnapshotIndex + 1; i <= last; i++ {
		l := new(raft.Log)
		if err := o.n.logs.GetLog(i, l); err != nil {
			return st, fmt.Errorf("raftnode: reading the log at index %d (after the snapshot at %d): %w", i, st.SnapshotIndex, err)
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			batch = append(batch, l)
			if len(batch) == replayBatch {
				flush()
			}
		}
		st.Index, st.Term = l.Index, l.Term
		st.Entries++
	}
	flush()
	return st, nil
}

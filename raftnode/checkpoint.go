package raftnode

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
)

// Checkpoints: the leader periodically proposes an entry carrying its chain
// value at an earlier index (the last index it had applied); every node
// compares it, on apply, with its own value at that index. A node that
// finds a mismatch has applied something the leader did not: it fences
// itself (Diverged), stops standing for election, and says so to every
// client until an operator rebuilds it from a healthy member. This is
// etcd's corruption check, done per entry and continuously.
//
// Anchors start the chain. A leader whose chain is unknown (every node of
// a new cluster, or a node restored from a snapshot written before chains
// existed) proposes one once it has applied its whole log; every node
// starts its chain at the anchor, so from there on all chains agree.
//
// Both are raft command entries with no data and the checkpoint in
// raft.Log.Extensions, so raftnode recognises them without knowing the
// state machine's encoding, and the state machine never sees them:
//
//	"LCCP" | version 1 | kind (1 anchor, 2 checkpoint) | index u64 | hash [32]
var checkpointMagic = []byte("LCCP")

const (
	checkpointSize   = 4 + 1 + 1 + 8 + 32
	checkpointAnchor = 1
	checkpointVerify = 2
)

type checkpoint struct {
	anchor bool
	index  uint64
	hash   [32]byte
}

func (c checkpoint) encode() []byte {
	b := make([]byte, checkpointSize)
	copy(b, checkpointMagic)
	b[4] = 1
	b[5] = checkpointVerify
	if c.anchor {
		b[5] = checkpointAnchor
	}
	binary.BigEndian.PutUint64(b[6:], c.index)
	copy(b[14:], c.hash[:])
	return b
}

// parseCheckpoint recognises a checkpoint or anchor entry.
func parseCheckpoint(l *raft.Log) (checkpoint, bool) {
	e := l.Extensions
	if l.Type != raft.LogCommand || len(l.Data) != 0 || len(e) != checkpointSize || !bytes.HasPrefix(e, checkpointMagic) || e[4] != 1 {
		return checkpoint{}, false
	}
	c := checkpoint{anchor: e[5] == checkpointAnchor, index: binary.BigEndian.Uint64(e[6:])}
	copy(c.hash[:], e[14:])
	return c, true
}

type checkpointVerdict struct {
	checked  bool   // this node could compare
	at       uint64 // the checkpoint entry's own index
	mismatch error
}

// verify compares a checkpoint with this node's chain; f.mu is held.
func (f *trackingFSM) verify(c checkpoint, at uint64) checkpointVerdict {
	mine, ok, why := f.chain.at(c.index)
	if !ok {
		f.logger.Debug("checkpoint not comparable here", "checkpoint_index", at, "index", c.index, "why", why)
		return checkpointVerdict{}
	}
	v := checkpointVerdict{checked: true, at: at}
	if mine != c.hash {
		v.mismatch = &divergedError{
			Checkpoint: at, Index: c.index,
			Leader: hex.EncodeToString(c.hash[:]), Local: hex.EncodeToString(mine[:]),
		}
	}
	return v
}

// divergedError says that this replica's applied history differs from the
// leader's: at Index its chain value is Local, the leader's checkpoint
// entry at Checkpoint says Leader.
type divergedError struct {
	Checkpoint, Index uint64
	Leader, Local     string
}

func (e *divergedError) Error() string {
	return fmt.Sprintf("this replica diverged from the cluster: the checkpoint at index %d says the applied-entry hash at index %d is %.16s…, this node has %.16s…; it serves no clients and stands for no election until it is rebuilt from a healthy member",
		e.Checkpoint, e.Index, e.Leader, e.Local)
}

// ErrDiverged matches every *divergedError.
var ErrDiverged = errors.New("replica diverged")

func (e *divergedError) Is(target error) bool { return target == ErrDiverged }

// Diverged returns nil while this replica agrees with every checkpoint it
// applied, and the *divergedError (errors.Is ErrDiverged) once it found a
// mismatch, now or before a restart.
func (n *Node) Diverged() error { return n.fences.get(fenceDiverged) }

func (n *Node) isDiverged() bool { return n.Diverged() != nil }

// fence records d as the divergence, once; it reports whether d was the first.
func (n *Node) fence(d *divergedError) bool {
	if n.isDiverged() {
		return false
	}
	return n.fences.set(fenceDiverged, d)
}

// AppliedHash returns the running hash of every applied entry: the last
// index folded in and the value through it. known is false until this
// node's chain starts (at the cluster's anchor entry, or a snapshot that
// carries the chain).
func (n *Node) AppliedHash() (index uint64, hash [32]byte, known bool) {
	return n.fsm.Chain()
}

// HashAt returns the chain's value as of index i (after the last applied
// entry at or below i), if this node remembers it; why says why not.
func (n *Node) HashAt(i uint64) (hash [32]byte, ok bool, why string) {
	return n.fsm.ChainAt(i)
}

// divergedFile marks a fenced data directory, so that a restart does not
// bring a diverged replica back into service.
const divergedFile = "DIVERGED"

// loadDiverged fences the node at start if its data directory says so.
func (n *Node) loadDiverged() {
	b, err := os.ReadFile(filepath.Join(n.cfg.DataDir, divergedFile))
	if err != nil {
		return
	}
	d := &divergedError{}
	fmt.Sscanf(string(b), "checkpoint=%d index=%d leader=%s local=%s", &d.Checkpoint, &d.Index, &d.Leader, &d.Local)
	n.fence(d)
	n.logger.Error("REPLICA FENCED: this data directory diverged from the cluster earlier; rebuild it from a healthy member (README, Operations)",
		"file", filepath.Join(n.cfg.DataDir, divergedFile), "detail", d.Error())
}

// checkpointed is trackingFSM.onCheckpoint: it fences the node on the first
// mismatch.
func (n *Node) checkpointed(at uint64, mismatch error) {
	if mismatch == nil {
		n.checkpointsOK.Add(1)
		return
	}
	d := mismatch.(*divergedError)
	if !n.fence(d) {
		return
	}
	n.logger.Error("REPLICA DIVERGED: fencing this node: it refuses every client request and stands for no election until rebuilt from a healthy member (README, Operations)",
		"checkpoint_index", d.Checkpoint, "index", d.Index, "leader_hash", d.Leader, "local_hash", d.Local)
	mark := fmt.Sprintf("checkpoint=%d index=%d leader=%s local=%s\n", d.Checkpoint, d.Index, d.Leader, d.Local)
	if err := os.WriteFile(filepath.Join(n.cfg.DataDir, divergedFile), []byte(mark), 0o600); err != nil {
		n.logger.Error("could not mark the data directory as diverged", "error", err)
	}
	if n.raft.State() == raft.Leader {
		go func() { // not on the FSM goroutine: the transfer waits for it
			if err := n.raft.LeadershipTransfer().Error(); err != nil {
				n.logger.Error("a diverged leader could not hand leadership over", "error", err)
			}
		}()
	}
}

// runCheckpoints proposes anchors and checkpoints while this node leads.
func (n *Node) runCheckpoints() {
	defer n.wg.Done()
	leading, cancel := n.SubscribeLeadership()
	defer cancel()
	tick := time.NewTicker(min(n.cfg.CheckpointInterval, 250*time.Millisecond))
	defer tick.Stop()
	var isLeader bool
	var lastIndex uint64 // chain index of the last checkpoint proposed
	var lastAt time.Time
	for {
		select {
		case l, ok := <-leading:
			if !ok {
				return
			}
			isLeader = l
			lastAt = time.Now()
			continue
		case <-tick.C:
		case <-n.stopped:
			return
		}
		if !isLeader || n.isDiverged() {
			continue
		}
		index, hash, known := n.fsm.Chain()
		if !known {
			n.proposeAnchor()
			continue
		}
		due := n.fsm.sinceCheckpoint.Load() >= n.cfg.CheckpointEntries ||
			time.Since(lastAt) >= n.cfg.CheckpointInterval
		if !due || index == lastIndex {
			continue
		}
		if err := n.proposeCheckpoint(checkpoint{index: index, hash: hash}); err != nil {
			n.logger.Debug("checkpoint not proposed", "error", err)
			continue
		}
		lastIndex, lastAt = index, time.Now()
	}
}

// proposeAnchor starts the chain once the leader has applied its whole log
// (its term's barrier): before that, an anchor may already be in the log.
func (n *Node) proposeAnchor() {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTimeout)
	defer cancel()
	if err := n.ensureTermBarrier(ctx, n.raft.CurrentTerm()); err != nil {
		return
	}
	if _, _, known := n.fsm.Chain(); known {
		return
	}
	if err := n.proposeCheckpoint(checkpoint{anchor: true}); err != nil {
		n.logger.Debug("anchor not proposed", "error", err)
		return
	}
	n.logger.Info("started the applied-entry hash chain with an anchor entry")
}

// proposeCheckpoint appends c and waits for it, or for the node to stop:
// raft leaves the futures still queued at shutdown unanswered, and a
// checkpoint a cut-off leader appended would otherwise hold Shutdown.
func (n *Node) proposeCheckpoint(c checkpoint) error {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTimeout)
	defer cancel()
	f := n.raft.ApplyLog(raft.Log{Extensions: c.encode()}, defaultTimeout)
	resolved, err := n.await(ctx, f)
	if !resolved {
		return fmt.Errorf("%w: checkpoint: %v", ErrOutcomeUnknown, err)
	}
	return err
}

// CheckpointsVerified counts the checkpoints this node compared with its
// own chain and found equal.
func (n *Node) CheckpointsVerified() uint64 { return n.checkpointsOK.Load() }

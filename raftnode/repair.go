package raftnode

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
)

// Damaged storage and its repair (CTRL's rule, Alagappan et al., "Protocol-
// Aware Recovery for Consensus-Based Storage", FAST '18): a node that finds
// its log or its term and vote damaged drops what it cannot trust, and
// then neither votes, nor stands for election, nor serves clients until a
// leader has given it the committed log back.
//
// Why not vote: the node may have acknowledged entries to a leader that it
// no longer has. That leader counted the acknowledgement towards a commit;
// a candidate lacking the entry can now win with this node's vote (or this
// node itself, with a log that is still longer than another's), and the
// committed entry is gone from the cluster's history: grants told to
// clients are undone, and their tokens granted again to others.
//
// When it is repaired: once it follows a leader of term T and its log holds
// that leader's committed entry of term T at the commit index (the clamp,
// clamp.go, makes the commit index a follower learns one its log provably
// shares with the leader). A leader of term T holds every entry committed
// before T (Leader Completeness), and commits only through an entry of
// its own term, so the node's log then holds every committed entry,
// including any it had acknowledged and lost. A damaged term or vote is
// pinned at T before the node votes again (checkedStable.pinVote), so it
// cannot grant a second vote in a term it may have voted in and forgot.
//
// DataDir/DAMAGED keeps the fence across restarts until the repair.

// damagedFile marks a data directory whose stores were found damaged and
// that has not been repaired since.
const damagedFile = "DAMAGED"

// repairPoll paces the check for a completed repair.
const repairPoll = 200 * time.Millisecond

// markDamaged fences the node as damaged and records d in the data
// directory (durably: a crash right after must not forget it).
func (n *Node) markDamaged(d *storageDamage) {
	if prev, _ := n.Damaged().(*storageDamage); prev != nil && prev.Store == d.Store && prev.Index == d.Index {
		return // the same damage, read again
	}
	if !n.fences.set(fenceDamaged, d) {
		n.logger.Error("more storage damage found", "store", d.Store, "path", d.Path, "index", d.Index, "reason", d.Reason)
		return
	}
	n.logger.Error("STORAGE DAMAGED: this node serves no clients, votes in no election and stands for none until repaired from the leader (README, Guarantees)",
		"store", d.Store, "path", d.Path, "index", d.Index, "reason", d.Reason)
	b, _ := json.Marshal(d)
	if err := writeFileDurably(filepath.Join(n.cfg.DataDir, damagedFile), append(b, '\n')); err != nil {
		n.logger.Error("could not record the damage in the data directory", "error", err)
	}
}

// checkStores fences the node for the damage an earlier run recorded and
// for whatever the checks at open found (store.go: the bolt meta pages and
// the term/vote shadow, raft-wal's tail, every log entry's checksum;
// snapcheck.go: the snapshots), records it, and only then drops the
// damaged log suffix. It runs before raft starts: a damaged node never
// votes, not even once.
func (n *Node) checkStores() error {
	n.loadDamaged()
	dir := snapshotsDir(n.cfg.DataDir)
	if err := removePartialSnapshots(dir, n.logger); err != nil {
		return err
	}
	d, err := checkSnapshots(dir, n.stores.sums, n.logger)
	if err != nil {
		return fmt.Errorf("raftnode: checking the snapshots in %s: %w", dir, err)
	}
	n.stores.addDamage(d)
	for _, d := range n.stores.damage {
		n.markDamaged(d)
	}
	if err := n.stores.dropDamagedSuffix(); err != nil {
		return err
	}
	n.stores.sums.setOnDamage(n.markDamaged)
	return nil
}

// loadDamaged fences the node at start if an earlier run found damage
// that was not repaired.
func (n *Node) loadDamaged() {
	b, err := os.ReadFile(filepath.Join(n.cfg.DataDir, damagedFile))
	if err != nil {
		return
	}
	d := &storageDamage{}
	if json.Unmarshal(b, d) != nil || d.Store == "" {
		d = &storageDamage{Store: "data directory", Path: filepath.Join(n.cfg.DataDir, damagedFile), Reason: "marked damaged by an earlier run"}
	}
	n.fences.set(fenceDamaged, d)
	n.logger.Error("STORAGE DAMAGED (found by an earlier run, not repaired yet): this node waits to be repaired from the leader",
		"store", d.Store, "path", d.Path, "index", d.Index, "reason", d.Reason)
}

// runRepair waits, while the node is damaged, for the repair to complete,
// and then lifts the fence.
func (n *Node) runRepair() {
	defer n.wg.Done()
	tick := time.NewTicker(repairPoll)
	defer tick.Stop()
	for {
		select {
		case <-n.stopped:
			return
		case <-tick.C:
		}
		if n.Damaged() == nil {
			continue
		}
		if n.raft.State() == raft.Leader {
			// Damage found at run time by a read: hand over (a damaged
			// node is never elected, but it may have been leading).
			if err := n.raft.LeadershipTransfer().Error(); err != nil {
				n.logger.Error("a damaged leader could not hand leadership over", "error", err)
			}
			continue
		}
		term, leader, ok := n.repaired()
		if !ok {
			continue
		}
		if err := n.finishRepair(term, leader); err != nil {
			n.logger.Error("repair not recorded; will retry", "error", err)
			continue
		}
	}
}

// repaired reports whether this node's log now provably holds every
// committed entry: it follows a leader of term T, and the entry at its
// commit index is of term T and applied.
func (n *Node) repaired() (term uint64, leader raft.Server, ok bool) {
	if n.raft.State() != raft.Follower {
		return 0, leader, false
	}
	leader.Address, leader.ID = n.raft.LeaderWithID()
	if leader.ID == "" {
		return 0, leader, false
	}
	term = n.raft.CurrentTerm()
	commit := n.raft.CommitIndex()
	if commit == 0 || n.raft.AppliedIndex() < commit {
		return 0, leader, false
	}
	var l raft.Log
	if err := n.logs.GetLog(commit, &l); err != nil || l.Term != term {
		return 0, leader, false
	}
	return term, leader, n.raft.CurrentTerm() == term
}

// finishRepair pins the vote at term, removes the marker and lifts the
// fence. The vote names the leader as raft records a vote (the
// transport's encoding of its address), so the leader itself is not
// refused a vote it may already have had.
func (n *Node) finishRepair(term uint64, leader raft.Server) error {
	if err := n.stores.checked.pinVote(term, n.transport.EncodePeer(leader.ID, leader.Address)); err != nil {
		return fmt.Errorf("pinning the vote at term %d: %w", term, err)
	}
	if err := os.Remove(filepath.Join(n.cfg.DataDir, damagedFile)); err != nil && !os.IsNotExist(err) {
		return err
	}
	if err := fsyncDir(n.cfg.DataDir); err != nil {
		return err
	}
	d := n.Damaged()
	n.fences.clear(fenceDamaged)
	n.logger.Info("STORAGE REPAIRED: the log holds the leader's committed entries again; this node votes and serves again",
		"term", term, "leader", leader.ID, "commit_index", n.raft.CommitIndex(), "damage", d)
	return nil
}

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
	if !n.fences.set(fenceDamaged, d) {
		n.logger.Error("more storage damage found", "store", d.Store, "path", d.Path, "index", d.Index, "reason", d.Reason)
		return
	}
	n.logger.Error("STORAGE DAMAGED: this node serves no clients, votes in no election and stands for none until repaired from the leader (README, Guarantees)",
		"store", d.Store, "path", d.Path, "index", d.Index, "reason", d.Reason)
	b, _ := json.Marshal(d)
	if err := writeFileSync(filepath.Join(n.cfg.DataDir, damagedFile), append(b, '\n')); err != nil {
		n.logger.Error("could not record the damage in the data directory", "error", err)
	}
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
func (n *Node) repaired() (term uint64, leader raft.ServerID, ok bool) {
	if n.raft.State() != raft.Follower {
		return 0, "", false
	}
	_, leader = n.raft.LeaderWithID()
	if leader == "" {
		return 0, "", false
	}
	term = n.raft.CurrentTerm()
	commit := n.raft.CommitIndex()
	if commit == 0 || n.raft.AppliedIndex() < commit {
		return 0, "", false
	}
	var l raft.Log
	if err := n.logs.GetLog(commit, &l); err != nil || l.Term != term {
		return 0, "", false
	}
	return term, leader, n.raft.CurrentTerm() == term
}

// finishRepair pins the vote at term (if the stable store can), removes
// the marker and lifts the fence.
func (n *Node) finishRepair(term uint64, leader raft.ServerID) error {
	if p, ok := n.stores.stableStore().(interface {
		pinVote(term uint64, candidate []byte) error
	}); ok {
		if err := p.pinVote(term, []byte(leader)); err != nil {
			return fmt.Errorf("pinning the vote at term %d: %w", term, err)
		}
	}
	if err := os.Remove(filepath.Join(n.cfg.DataDir, damagedFile)); err != nil && !os.IsNotExist(err) {
		return err
	}
	syncDir(n.cfg.DataDir)
	d := n.Damaged()
	n.fences.clear(fenceDamaged)
	n.logger.Info("STORAGE REPAIRED: the log holds the leader's committed entries again; this node votes and serves again",
		"term", term, "leader", leader, "commit_index", n.raft.CommitIndex(), "damage", d)
	return nil
}

// writeFileSync writes b to path through a temporary file, fsynced and
// renamed, and fsyncs the directory.
func writeFileSync(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	syncDir(filepath.Dir(path))
	return nil
}

// syncDir makes a rename or removal in dir durable (best effort).
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

package raftnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

// A member that survives the loss of the rest of its cluster becomes a
// one-node cluster with its whole state (Recover): it elects itself,
// serves every entry it had, goes on above its last index, and its chain
// of applied-entry hashes is the one it had (configuration entries
// included, which raft's RecoverCluster does not hand the FSM).
func TestRecoverAfterLosingAMajority(t *testing.T) {
	t.Parallel()
	// No checkpoints but the anchor: the survivor's log ends with what it
	// applied, so its chain's last value is the one to compare.
	c := newCluster(t, 3, func(cfg *Config) { cfg.CheckpointInterval, cfg.CheckpointEntries = time.Hour, 1<<40 })
	leader := c.waitLeader()
	propose(t, leader.node, "a", "b")
	// The chain is known once the leader's anchor is applied: the
	// configuration change below then falls inside it.
	testutil.Eventually(t, 10*time.Second, "the chain to start", func() bool {
		for _, tn := range c.nodes {
			if _, _, known := tn.node.AppliedHash(); !known {
				return false
			}
		}
		return true
	})
	var gone *testNode
	for _, tn := range c.nodes {
		if tn != leader {
			gone = tn
			break
		}
	}
	if err := leader.node.Leave(ctxTimeout(t, 5*time.Second), gone.id); err != nil {
		t.Fatal(err)
	}
	c.stop(gone, false)
	propose(t, leader.node, "c", "d")
	want := []string{"a", "b", "c", "d"}
	c.waitEntries(want, c.running()...)
	var survivor *testNode
	for _, tn := range c.running() {
		if tn != leader {
			survivor = tn
		}
	}
	// Every node of the two-voter cluster stops; the leader is lost for
	// good: a majority.
	node := survivor.node
	for _, tn := range c.running() {
		c.stop(tn, false)
	}
	lastBefore := node.LastIndex()
	hashAt, hash, known := node.AppliedHash()
	if !known {
		t.Fatal("the survivor's chain is not known")
	}

	res, err := Recover(RecoverConfig{DataDir: survivor.dir, ID: survivor.id, Logger: testLogger(t, "recover")}, &listFSM{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Before) != 2 || !slices.ContainsFunc(res.Before, func(m Member) bool { return m.ID == leader.id }) {
		t.Errorf("Before = %+v; want the two voters", res.Before)
	}
	if want := []Member{{ID: survivor.id, Addr: survivor.addr, Suffrage: "Voter"}}; !slices.Equal(res.After, want) {
		t.Errorf("After = %+v; want %+v", res.After, want)
	}
	if res.Index != lastBefore || res.Term == 0 || res.Entries != res.Index-res.SnapshotIndex {
		t.Errorf("recovered %+v; the log ended at %d", res, lastBefore)
	}

	// Started as before (the old Bootstrap is ignored), it leads alone.
	c.start(survivor, c.peers())
	testutil.Eventually(t, 10*time.Second, survivor.id+" to lead alone", survivor.node.IsLeader)
	c.waitEntries(want, survivor)
	if m := members(t, survivor.node); len(m) != 1 || m[0].ID != survivor.id {
		t.Fatalf("Members = %+v", m)
	}
	if h, ok, why := survivor.node.HashAt(hashAt); !ok || h != hash {
		t.Fatalf("the chain at %d: %x (%v %s); before the recovery: %x", hashAt, h, ok, why, hash)
	}
	r, err := survivor.node.Propose(ctxTimeout(t, 5*time.Second), []byte("e"))
	if err != nil || r.Index <= res.Index {
		t.Fatalf("a new entry: %+v, %v; want an index above %d", r, err, res.Index)
	}
	c.waitEntries(append(want, "e"), survivor)
}

// Recover refuses a directory a running node holds, one without raft
// state (and creates nothing there), an id the configuration does not
// have, and a damaged or diverged directory, which it leaves as it was.
func TestRecoverRefuses(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	tn := c.nodes[0]
	propose(t, tn.node, "a")
	recoverAs := func(id string) error {
		_, err := Recover(RecoverConfig{DataDir: tn.dir, ID: id, Logger: testLogger(t, "recover")}, &listFSM{})
		return err
	}
	if err := recoverAs(tn.id); err == nil || !strings.Contains(err.Error(), "in use by process") {
		t.Fatalf("a running node's directory: %v", err)
	}
	c.stop(tn, true)

	empty := t.TempDir()
	missing := filepath.Join(empty, "nothing-here")
	for _, dir := range []string{empty, missing} {
		_, err := Recover(RecoverConfig{DataDir: dir, ID: "n1"}, &listFSM{})
		if !errors.Is(err, ErrNoState) {
			t.Errorf("%s: %v; want ErrNoState", dir, err)
		}
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Errorf("the refused recovery created %v", entries)
	}
	if _, err := Recover(RecoverConfig{DataDir: filepath.Dir(tn.dir), ID: tn.id}, &listFSM{}); !errors.Is(err, ErrNoState) {
		t.Errorf("the directory above: %v", err)
	}
	if err := recoverAs("n9"); err == nil || !strings.Contains(err.Error(), `no server "n9"`) || !strings.Contains(err.Error(), tn.id) {
		t.Errorf("an unknown id: %v", err)
	}

	for _, m := range []struct {
		file, content string
		is            error
	}{
		{divergedFile, "checkpoint=9 index=8 leader=aa local=bb\n", ErrDiverged},
		{damagedFile, `{"Store":"log","Path":"wal","Index":3,"Reason":"test"}` + "\n", ErrDamaged},
	} {
		path := filepath.Join(tn.dir, m.file)
		if err := os.WriteFile(path, []byte(m.content), 0o600); err != nil {
			t.Fatal(err)
		}
		err := recoverAs(tn.id)
		if !errors.Is(err, m.is) || !strings.Contains(err.Error(), "snapshot restore") {
			t.Errorf("%s: %v; want %v and what to do", m.file, err, m.is)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing was changed: the node starts on its log as before.
	c.start(tn, nil)
	c.waitLeader()
	c.waitEntries([]string{"a"}, tn)
	if m := members(t, tn.node); len(m) != 1 {
		t.Fatalf("Members = %+v", m)
	}
}

// ReadState restores a stopped node's state as raft would at start (its
// snapshot, then its log after it), changing nothing: the node starts on
// the directory as before. It refuses a running node's directory.
func TestReadStateOfAStoppedNode(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	tn := c.nodes[0]
	var want []string
	for i := range 5 {
		want = append(want, fmt.Sprint("before-", i))
	}
	propose(t, tn.node, want...)
	snapAt, err := tn.node.Snapshot(ctxTimeout(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		want = append(want, fmt.Sprint("after-", i))
	}
	propose(t, tn.node, want[5:]...)
	if _, err := ReadState(tn.dir, &listFSM{}, nil); err == nil || !strings.Contains(err.Error(), "in use by process") {
		t.Fatalf("a running node's directory: %v", err)
	}
	last := tn.node.LastIndex()
	c.stop(tn, true)

	for range 2 { // and again: the first read changed nothing
		f := &listFSM{}
		st, err := ReadState(tn.dir, f, testLogger(t, "read"))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(f.Entries(), want) {
			t.Fatalf("read %q; want %q", f.Entries(), want)
		}
		if st.SnapshotIndex != snapAt || st.Index != last || st.Entries != last-snapAt || st.Term == 0 ||
			len(st.Configuration) != 1 || st.Configuration[0].ID != tn.id {
			t.Fatalf("state %+v; the snapshot is at %d, the log ends at %d", st, snapAt, last)
		}
	}
	c.start(tn, nil)
	c.waitLeader()
	c.waitEntries(want, tn)
}

// A data directory whose log is still in raft.db (written before raft-wal)
// is read, and recovered, where it is: no offline tool moves the log.
func TestOfflineToolsLeaveABoltLogInPlace(t *testing.T) {
	t.Parallel()
	dir := boltDataDir(t)
	f := &listFSM{}
	st, err := ReadState(dir, f, testLogger(t, "read"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.Entries(), fixtureEntries()) || st.SnapshotIndex == 0 || st.Entries == 0 {
		t.Fatalf("read %q (%+v); want the fixture's entries from its snapshot and log", f.Entries(), st)
	}
	if _, err := os.Stat(filepath.Join(dir, "wal")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadState made a WAL: %v", err)
	}
	res, err := Recover(RecoverConfig{DataDir: dir, ID: "n1", Addr: "127.0.0.1:1", Logger: testLogger(t, "recover")}, &listFSM{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Index != st.Index || len(res.After) != 1 || res.After[0].Addr != "127.0.0.1:1" {
		t.Fatalf("recovered %+v; the log ended at %d", res, st.Index)
	}
	if _, err := os.Stat(filepath.Join(dir, "wal")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Recover made a WAL: %v", err)
	}
	// The recovered snapshot holds everything; the log is gone.
	f = &listFSM{}
	if st, err = ReadState(dir, f, nil); err != nil || st.SnapshotIndex != res.Index || st.Entries != 0 ||
		!slices.Equal(f.Entries(), fixtureEntries()) {
		t.Fatalf("after the recovery: %+v %v, %q", st, err, f.Entries())
	}
	if st.Configuration[0].Addr != "127.0.0.1:1" || st.Configuration[0].Suffrage != raft.Voter.String() {
		t.Fatalf("configuration %+v", st.Configuration)
	}
}

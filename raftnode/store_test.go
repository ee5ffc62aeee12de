package raftnode

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

// testdata/bolt-datadir.tar.gz is a data directory written by the code
// before raft-wal (its log in raft.db): a one-node cluster that applied
// before-snap-0..29, took a snapshot, then applied after-snap-0..19.
func boltDataDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("tar", "-C", dir, "-xzf", "testdata/bolt-datadir.tar.gz").CombinedOutput(); err != nil {
		t.Fatalf("untar: %v %s", err, out)
	}
	// A stopped migration leaves this behind; the next start begins again.
	if err := os.MkdirAll(filepath.Join(dir, "wal.migrating", "junk"), 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

func fixtureEntries(extra ...string) []string {
	var want []string
	for i := range 30 {
		want = append(want, fmt.Sprint("before-snap-", i))
	}
	for i := range 20 {
		want = append(want, fmt.Sprint("after-snap-", i))
	}
	return append(want, extra...)
}

func startOn(t *testing.T, dir string, configure ...func(*Config)) (*Node, *listFSM, error) {
	cfg := Config{ID: "n1", DataDir: dir, BindAddr: "127.0.0.1:0", Logger: testLogger(t, "n1")}
	for _, c := range configure {
		c(&cfg)
	}
	f := &listFSM{}
	n, err := New(cfg, f)
	if err == nil {
		t.Cleanup(func() { n.Shutdown(ctxTimeout(t, 5*time.Second)) })
	}
	return n, f, err
}

// A data directory whose log is in raft.db moves it into raft-wal once, at
// start, and keeps its state; afterwards it runs on the WAL, and the bolt
// log is empty.
func TestBoltLogMovesIntoWAL(t *testing.T) {
	dir := boltDataDir(t)
	n, f, err := startOn(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if n.stores.wal == nil {
		t.Fatal("the node does not run on raft-wal")
	}
	if last, _ := n.stores.stable.LastIndex(); last != 0 {
		t.Errorf("raft.db still holds a log up to %d", last)
	}
	if _, err := os.Stat(filepath.Join(dir, "wal.migrating")); !os.IsNotExist(err) {
		t.Errorf("wal.migrating is still there: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, "leader", n.IsLeader)
	testutil.Eventually(t, 10*time.Second, "the old entries", func() bool { return slices.Equal(f.Entries(), fixtureEntries()) })
	propose(t, n, "on-wal")
	if err := n.Shutdown(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}

	// Again: no second migration, everything there.
	n, f, err = startOn(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "leader", n.IsLeader)
	testutil.Eventually(t, 10*time.Second, "every entry after a restart on the WAL", func() bool {
		return slices.Equal(f.Entries(), fixtureEntries("on-wal"))
	})
	if err := n.Shutdown(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}

	// A directory with a WAL does not go back to bolt.
	if _, _, err := startOn(t, dir, func(c *Config) { c.LogStore = LogStoreBolt }); err == nil || !strings.Contains(err.Error(), "raft-wal") {
		t.Fatalf("LogStore bolt on a WAL directory: %v", err)
	}
}

// LogStoreBolt keeps the log in raft.db, as before.
func TestBoltLogStoreStillWorks(t *testing.T) {
	dir := boltDataDir(t)
	n, f, err := startOn(t, dir, func(c *Config) { c.LogStore = LogStoreBolt })
	if err != nil {
		t.Fatal(err)
	}
	if n.stores.wal != nil {
		t.Fatal("LogStore bolt opened a WAL")
	}
	testutil.Eventually(t, 10*time.Second, "leader", n.IsLeader)
	testutil.Eventually(t, 10*time.Second, "the old entries", func() bool { return slices.Equal(f.Entries(), fixtureEntries()) })
	if _, err := os.Stat(filepath.Join(dir, "wal")); !os.IsNotExist(err) {
		t.Errorf("LogStore bolt made a wal directory: %v", err)
	}
}

// snapsum_test.go tests meta.sum (snapsum.go): written for every snapshot
// (taken, installed from the leader, seeded), verified at start and at
// every Open, and written once for a snapshot that has none.

package raftnode

import (
	"bytes"
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

// snapshotDirs lists the snapshots in dir (see snapshotsDir).
func snapshotDirs(t *testing.T, dir string) []snapshotOnDisk {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []snapshotOnDisk
	for _, e := range entries {
		if s, ok := parseSnapshotName(e.Name()); ok && e.IsDir() {
			out = append(out, s)
		}
	}
	return out
}

// requireSealed fails unless every snapshot in dir has a meta.sum that
// matches its meta.json, and verifies.
func requireSealed(t *testing.T, dir string) {
	t.Helper()
	snaps := snapshotDirs(t, dir)
	if len(snaps) == 0 {
		t.Fatalf("no snapshot in %s", dir)
	}
	for _, s := range snaps {
		path := filepath.Join(dir, s.name)
		b, err := os.ReadFile(filepath.Join(path, snapshotMetaFile))
		if err != nil {
			t.Fatal(err)
		}
		sealed, reason, err := checkSnapshotSum(path, b)
		if !sealed || reason != "" || err != nil {
			t.Fatalf("snapshot %s: sealed %v, %q, %v", s.name, sealed, reason, err)
		}
		if reason, err := verifySnapshot(dir, s); reason != "" || err != nil {
			t.Fatalf("snapshot %s: %q, %v", s.name, reason, err)
		}
	}
}

// The snapshots a node takes (snapTestDataDir: two, each opened by
// Node.Snapshot through the store's Open) have a meta.sum.
func TestSnapshotSumWrittenWhenTaken(t *testing.T) {
	dir, _ := snapTestDataDir(t, 10240)
	requireSealed(t, snapshotsDir(dir))
}

// A snapshot received from the leader (InstallSnapshot: raft writes it
// through the follower's store's Create) has a meta.sum, and so has a
// seeded one (SeedDataDir).
func TestSnapshotSumWrittenWhenInstalledOrSeeded(t *testing.T) {
	t.Run("install", func(t *testing.T) {
		c := newCluster(t, 1, func(c *Config) {
			c.snapshotThreshold = 1 << 30
			c.trailingLogs = 2
		})
		leader := c.waitLeader()
		var want []string
		for i := range 20 {
			want = append(want, fmt.Sprint("v", i))
		}
		propose(t, leader.node, want[:10]...)
		if _, err := leader.node.Snapshot(ctxTimeout(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		propose(t, leader.node, want[10:]...)
		if _, err := leader.node.Snapshot(ctxTimeout(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		n2 := &testNode{id: "n2", dir: t.TempDir()}
		c.start(n2, nil)
		if err := leader.node.Join(ctxTimeout(t, 5*time.Second), n2.id, n2.addr); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, n2)
		c.waitEntries(want, n2)
		testutil.Eventually(t, 5*time.Second, "n2's installed snapshot", func() bool {
			return len(snapshotDirs(t, snapshotsDir(n2.dir))) > 0
		})
		requireSealed(t, snapshotsDir(n2.dir))
		// It was installed, not taken (n2 takes none: its threshold is
		// out of reach): its log does not start at 1 (it is empty, or
		// starts after the snapshot).
		if first, _ := n2.node.logs.FirstIndex(); first == 1 {
			t.Fatal("n2's log starts at 1: it did not receive a snapshot")
		}
	})
	t.Run("seed", func(t *testing.T) {
		dir := t.TempDir()
		if err := SeedDataDir(Seed{DataDir: dir, ID: "n1", Addr: "127.0.0.1:1", Index: 5, Data: strings.NewReader(`["e1"]`)}); err != nil {
			t.Fatal(err)
		}
		requireSealed(t, snapshotsDir(dir))
	})
}

// Every single-bit flip of meta.sum is refused too, naming it, and so is a
// meta.sum that cannot be read.
func TestSnapshotSumEveryBitFlipRefused(t *testing.T) {
	f := newSnapFixture(t)
	checked := newCheckedSnapshots(f.store, f.base, testLogger(t, "snapshots"))
	sink, err := checked.Create(1, 10, 1, snapTestConf, 1, snapTestTrans(t))
	if err != nil {
		t.Fatal(err)
	}
	sink.Write([]byte(`["e1"]`))
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	s, _ := parseSnapshotName(sink.ID())
	path := filepath.Join(f.dir, s.name, snapshotSumFile)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("meta.sum: %q", orig)
	for i := range orig {
		for bit := range 8 {
			b := bytes.Clone(orig)
			b[i] ^= 1 << bit
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			reason, err := verifySnapshot(f.dir, s)
			if err != nil || !strings.Contains(reason, snapshotSumFile) {
				t.Fatalf("%s: %q, %v", flipDescription(orig, i, bit), reason, err)
			}
		}
	}
	if err := os.WriteFile(path, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	if reason, err := verifySnapshot(f.dir, s); reason != "" || err != nil {
		t.Fatalf("restored: %q, %v", reason, err)
	}
}

// Open refuses a snapshot whose meta.json does not match its meta.sum,
// naming the file: raft's restore, the leader sending it to a follower,
// and a user's open all go through it. The intact snapshot opens.
func TestSnapshotOpenRefusesFlippedMeta(t *testing.T) {
	f := newSnapFixture(t)
	checked := newCheckedSnapshots(f.store, f.base, testLogger(t, "snapshots"))
	var ids []string
	for _, index := range []uint64{10, 20} {
		sink, err := checked.Create(1, index, 1, snapTestConf, 1, snapTestTrans(t))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(sink, `["e%d"]`, index)
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sink.ID())
		time.Sleep(2 * time.Millisecond)
	}
	f.log(t, 5, 25) // the log covers: setting the snapshot aside loses nothing
	meta, rc, err := checked.Open(ids[1])
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if meta.Index != 20 {
		t.Fatalf("opened index %d", meta.Index)
	}
	editFile(t, filepath.Join(f.dir, ids[1], snapshotMetaFile), `"Suffrage":0`, `"Suffrage":1`) // one bit: the voter a nonvoter
	if _, _, err := f.store.Open(ids[1]); err != nil {
		t.Fatalf("hashicorp/raft alone: %v (it was expected to open it)", err)
	}
	_, _, err = checked.Open(ids[1])
	if err == nil || !strings.Contains(err.Error(), "meta.json does not match its checksum in meta.sum") {
		t.Fatalf("Open of the flipped snapshot: %v", err)
	}
	t.Logf("refused: %v", err)
	// Raft's start would go on to the older one; at the next start
	// checkSnapshots sets the flipped one aside.
	if d := f.check(t); d != nil {
		t.Fatalf("damage %v", d)
	}
	if got := f.listed(t); !slices.Equal(got, ids[:1]) {
		t.Fatalf("raft lists %v, want %v", got, ids[:1])
	}
}

// A snapshot without meta.sum (an older version's, or one whose node
// stopped between raft's rename and meta.sum) is accepted once, as far as
// its fields allow, and sealed, with a warning: at start by
// checkSnapshots, or when it is first opened.
func TestSnapshotWithoutSumIsSealedOnce(t *testing.T) {
	t.Run("at-start", func(t *testing.T) {
		dir, ids := snapTestDataDir(t, 10240)
		for _, id := range ids {
			if err := os.Remove(filepath.Join(snapshotsDir(dir), id, snapshotSumFile)); err != nil {
				t.Fatal(err)
			}
		}
		res := restartRaft(t, dir, true)
		if res.panicked != nil || res.err != nil || res.damage != nil {
			t.Fatalf("restart: %+v", res)
		}
		if want := entriesThrough("a", "b"); !slices.Equal(res.entries, want) {
			t.Fatalf("restored %v, want %v", res.entries, want)
		}
		for i, id := range ids {
			_, err := os.Stat(filepath.Join(snapshotsDir(dir), id, snapshotSumFile))
			// The newest is checked at start and sealed; the older one is
			// not read (raft does not restore it) and stays as it was.
			if sealed := err == nil; sealed != (i == 1) {
				t.Fatalf("snapshot %s sealed: %v", id, sealed)
			}
		}
		requireSealedOne(t, snapshotsDir(dir), ids[1])
	})
	t.Run("at-open", func(t *testing.T) {
		f := newSnapFixture(t)
		f.snapshot(t, 10) // raft's store alone: no meta.sum
		checked := newCheckedSnapshots(f.store, f.base, testLogger(t, "snapshots"))
		_, rc, err := checked.Open(f.ids[0])
		if err != nil {
			t.Fatal(err)
		}
		rc.Close()
		requireSealedOne(t, f.dir, f.ids[0])
	})
	t.Run("at-open-fields-checked", func(t *testing.T) {
		f := newSnapFixture(t)
		f.snapshot(t, 10)
		editFile(t, filepath.Join(f.dir, f.ids[0], snapshotMetaFile), `"Index":10`, `"Index":11`)
		checked := newCheckedSnapshots(f.store, f.base, testLogger(t, "snapshots"))
		if _, _, err := checked.Open(f.ids[0]); err == nil || !strings.Contains(err.Error(), "meta.json says term 1, index 11") {
			t.Fatalf("Open: %v", err)
		}
		if _, err := os.Stat(filepath.Join(f.dir, f.ids[0], snapshotSumFile)); !os.IsNotExist(err) {
			t.Fatalf("a snapshot that does not verify was sealed: %v", err)
		}
	})
}

func requireSealedOne(t *testing.T, dir, id string) {
	t.Helper()
	path := filepath.Join(dir, id)
	b, err := os.ReadFile(filepath.Join(path, snapshotMetaFile))
	if err != nil {
		t.Fatal(err)
	}
	if sealed, reason, err := checkSnapshotSum(path, b); !sealed || reason != "" || err != nil {
		t.Fatalf("snapshot %s: sealed %v, %q, %v", id, sealed, reason, err)
	}
}

var _ raft.SnapshotStore = (*checkedSnapshots)(nil)

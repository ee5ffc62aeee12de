package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	binenc "encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/proccluster"
	"github.com/lockcluster/lockcluster/internal/testutil"
)

// queryJSON is 'lockcluster query -o json' against pc.
func queryJSON(t *testing.T, pc *procCluster) lockcluster.Snapshot {
	t.Helper()
	out, code := run(t, pc, "query", "-o", "json")
	var q lockcluster.Snapshot
	if code != 0 || json.Unmarshal([]byte(out), &q) != nil {
		t.Fatalf("query: exit %d: %s", code, out)
	}
	return q
}

// sameLocks compares two queries entry by entry (name, mode, session,
// request, token).
func sameLocks(a, b []lockcluster.LockInfo) bool {
	return slices.EqualFunc(a, b, func(x, y lockcluster.LockInfo) bool {
		return x.Name == y.Name && x.Mode == y.Mode && x.SessionID == y.SessionID && x.RequestID == y.RequestID && x.Token == y.Token
	})
}

// restoredCluster lays out two nodes whose node0 will run on a restored
// data directory and node1 will join it; neither is started.
func restoredCluster(t *testing.T) *procCluster {
	t.Helper()
	c, err := proccluster.New(proccluster.Config{Bin: binary(t), Nodes: 2, Dir: t.TempDir(), Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	rc := &procCluster{Cluster: c, t: t, bin: c.Bin}
	// node0's --bootstrap is ignored on a data directory with state; node1
	// joins through node0 instead.
	n1 := c.Nodes[1]
	i := slices.Index(n1.Args, "--bootstrap")
	n1.Args = append(slices.Delete(slices.Clone(n1.Args), i, i+2), "--join", c.Nodes[0].GRPC)
	t.Cleanup(func() {
		checkAppliedHashes(t, rc.RunningHTTP())
		rc.Stop()
		if t.Failed() {
			for _, p := range rc.Nodes {
				b, _ := os.ReadFile(p.Log)
				t.Logf("--- restored %s log:\n%s", p.ID, b)
			}
		}
	})
	return rc
}

// holdSome makes the state that the backup and recovery tests carry over:
// sessions a and b hold x exclusively and s shared, and a waiter queues for
// x. It returns the sessions' TTL option (long: they must outlive an
// outage), the state as 'query' shows it, and the highest token held.
func holdSome(t *testing.T, ctx context.Context, pc *procCluster) (lockcluster.Option, lockcluster.Snapshot, uint64) {
	t.Helper()
	ttl := lockcluster.WithTTL(5 * time.Minute)
	a := dialT(t, pc.addrs(), ttl, lockcluster.WithLabel("a"))
	b := dialT(t, pc.addrs(), ttl, lockcluster.WithLabel("b"))
	w := dialT(t, pc.addrs(), ttl, lockcluster.WithLabel("waiter"))
	for _, acq := range []struct {
		c    *lockcluster.Client
		name string
		mode lockcluster.Mode
	}{{a, "x", lockcluster.Exclusive}, {a, "s", lockcluster.Shared}, {b, "s", lockcluster.Shared}} {
		if _, err := acq.c.Acquire(ctx, acq.name, lockcluster.Options{Mode: acq.mode}); err != nil {
			t.Fatal(err)
		}
	}
	wctx, wcancel := context.WithCancel(ctx)
	t.Cleanup(wcancel) // the waiter queues until the test ends
	go w.Acquire(wctx, "x", lockcluster.Options{})
	testutil.Eventually(t, 10*time.Second, "the waiter to queue", func() bool {
		q, err := a.Query(ctx)
		return err == nil && len(q.Pending) == 1
	})
	before := queryJSON(t, pc)
	if len(before.Held) != 3 || len(before.Pending) != 1 {
		t.Fatalf("before: %+v", before)
	}
	var maxToken uint64
	for _, l := range before.Held {
		maxToken = max(maxToken, l.Token)
	}
	return ttl, before, maxToken
}

// A snapshot saved from a running cluster seeds a new one with the same
// sessions, held locks (exclusive and shared) and queue; new grants get
// tokens above every earlier one, and the new cluster grows by joining.
func TestSnapshotSaveRestoreRoundTrip(t *testing.T) {
	pc := startProcs(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Long TTLs: the restored cluster's sessions have no client renewing
	// them, and get a full TTL from its first leader's takeover.
	ttl, before, maxToken := holdSome(t, ctx, pc)
	sessions := leaderStatus(t, pc.addrs()).Sessions
	pc.directoryComplete(10 * time.Second) // every member's record is in the state

	file := filepath.Join(t.TempDir(), "backup.snap")
	out, code := run(t, pc, "snapshot", "save", file, "-o", "json")
	var info lockcluster.SnapshotInfo
	if code != 0 || json.Unmarshal([]byte(out), &info) != nil {
		t.Fatalf("snapshot save: exit %d: %s", code, out)
	}
	if info.Index < maxToken || len(info.Members) != 3 || info.Leader == "" {
		t.Fatalf("saved %+v; the highest token is %d", info, maxToken)
	}
	if _, err := os.Stat(file + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the temporary file is left: %v", err)
	}
	// A follower relays the leader's snapshot: the same state, unless an
	// entry came in between (the client sessions' own are not logged).
	follower := pc.Nodes[(pc.leader(5*time.Second)+1)%3].GRPC
	if out, code := run(t, pc, "snapshot", "save", file+".2", "--addr", follower, "-o", "json"); code != 0 || !strings.Contains(out, `"index"`) {
		t.Fatalf("snapshot save via a follower: exit %d: %s", code, out)
	}

	rc := restoredCluster(t)
	n0 := rc.Nodes[0]
	out, code = run(t, rc, "snapshot", "restore", file, "--data-dir", n0.Dir, "--id", n0.ID, "--raft-addr", n0.Raft, "-o", "json")
	var restored struct {
		Index, SeededIndex                      uint64
		MembersDropped, Sessions, Held, Pending int
	}
	if code != 0 || json.Unmarshal([]byte(out), &restored) != nil || restored.Index != info.Index || restored.Held != 3 || restored.Pending != 1 ||
		restored.MembersDropped != 3 || restored.SeededIndex != info.Index+3 {
		t.Fatalf("snapshot restore: exit %d: %s", code, out)
	}
	if out, code := run(t, rc, "snapshot", "restore", file, "--data-dir", n0.Dir, "--id", n0.ID, "--raft-addr", n0.Raft); code != exitFailure || !strings.Contains(out, "not empty") {
		t.Fatalf("a second restore into the same directory: exit %d: %s", code, out)
	}
	rc.start(0)
	rc.leader(15 * time.Second)
	if got := leaderStatus(t, rc.addrs()[:1]).Sessions; got != sessions {
		t.Fatalf("the restored cluster has %d sessions, the saved one had %d", got, sessions)
	}
	after := queryJSON(t, rc)
	if !sameLocks(before.Held, after.Held) || !sameLocks(before.Pending, after.Pending) {
		t.Fatalf("restored locks differ:\nbefore %+v\nafter  %+v", before, after)
	}

	// New grants go on above every token of the old cluster, and the
	// restored locks still hold.
	n := dialT(t, rc.addrs()[:1], ttl)
	l, err := n.Acquire(ctx, "new", lockcluster.Options{})
	if err != nil || l.Token() <= info.Index || l.Token() <= maxToken {
		t.Fatalf("a new grant: %v, token %d; want above %d", err, tokenOf(l), info.Index)
	}
	if _, err := n.Acquire(ctx, "x", lockcluster.Options{IfAvailable: true}); !errors.Is(err, lockcluster.ErrNotAvailable) {
		t.Fatalf("x, held in the snapshot: %v, want not available", err)
	}

	// The restored cluster grows: node1 joins and catches up.
	rc.start(1)
	rc.directoryComplete(20 * time.Second)
	if err := rc.CaughtUp(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "node1 to hold the restored state", func() bool {
		st := statusOf(t, rc.Nodes[1].GRPC)
		return st.Held == 4 && st.Pending == 1
	})
}

// statusOf is one node's own status (its own applied state's counts).
func statusOf(t *testing.T, addr string) lockcluster.Status {
	t.Helper()
	a, err := lockcluster.DialAdmin([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return a.Status(ctx)[0]
}

// leaderStatus is the status of the node that leads, among addrs.
func leaderStatus(t *testing.T, addrs []string) lockcluster.Status {
	t.Helper()
	var st lockcluster.Status
	testutil.Eventually(t, 10*time.Second, "a leader's status", func() bool {
		for _, a := range addrs {
			if st = statusOf(t, a); st.State == "Leader" {
				return true
			}
		}
		return false
	})
	return st
}

func tokenOf(l *lockcluster.Lock) uint64 {
	if l == nil {
		return 0
	}
	return l.Token()
}

// snapshotFile is a snapshot file in the documented format (snapshot.go
// at the module root) around state, saying index.
func snapshotFile(index uint64, state []byte) []byte {
	sum := sha256.Sum256(state)
	b := append([]byte("LCBACKUP"), 0, 0, 0, 1)
	b = binenc.BigEndian.AppendUint64(b, index)
	b = binenc.BigEndian.AppendUint64(b, 1)
	b = binenc.BigEndian.AppendUint64(b, uint64(len(state)))
	return append(append(b, sum[:]...), state...)
}

// restore runs 'lockcluster snapshot restore file --data-dir dir ...'.
func restore(t *testing.T, file, dir string, more ...string) (string, int) {
	t.Helper()
	args := append([]string{"snapshot", "restore", file, "--data-dir", dir, "--id", "n1", "--raft-addr", "127.0.0.1:7701"}, more...)
	out, err := exec.Command(binary(t), args...).CombinedOutput()
	return string(out), exitCode(err)
}

// restore refuses a damaged file, naming it, and writes nothing then; it
// takes a sound one.
func TestSnapshotRestoreRefusesADamagedFile(t *testing.T) {
	m := fsm.New()
	if err := m.Apply(7, fsm.Entry{Cmd: &fsm.SetMember{Member: fsm.Member{ID: "n1", RaftAddr: "127.0.0.1:7701"}}}).Result.Err; err != nil {
		t.Fatal(err)
	}
	state := m.Snapshot()
	good := snapshotFile(7, state)
	flipped := bytes.Clone(good)
	flipped[len(flipped)-5] ^= 1
	undecodable := snapshotFile(7, []byte("LCKSNAP\x00 not a state"))
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"flipped", flipped, "SHA-256"},
		{"truncated", good[:len(good)-1], "bytes of the"},
		{"text", []byte("hello, this is not a snapshot at all, not even close to one\n"), "not a lockcluster snapshot file"},
		{"wrong-index", snapshotFile(8, state), "the header says index 8, the state is at 7"},
		{"undecodable", undecodable, "the state does not decode"},
	} {
		file := filepath.Join(dir, c.name+".snap")
		if err := os.WriteFile(file, c.data, 0o600); err != nil {
			t.Fatal(err)
		}
		data := filepath.Join(dir, c.name+"-data")
		out, code := restore(t, file, data)
		if code != exitFailure || !strings.Contains(out, file) || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d: %s; want %d naming the file and %q", c.name, code, out, exitFailure, c.want)
		}
		if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the refused restore made %s", c.name, data)
		}
	}
	file := filepath.Join(dir, "good.snap")
	if err := os.WriteFile(file, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := restore(t, file, filepath.Join(dir, "good-data"), "-o", "json"); code != 0 || !strings.Contains(out, `"index": 7`) || !strings.Contains(out, `"membersDropped": 1`) {
		t.Fatalf("a sound file: exit %d: %s", code, out)
	}
	if out, code := restore(t, file, ""); code != exitUsage {
		t.Fatalf("no --data-dir: exit %d: %s", code, out)
	}
}

// With auth on, a snapshot needs an admin credential; a follower relays
// an admin's call to the leader with its own.
func TestSnapshotSaveNeedsAnAdmin(t *testing.T) {
	config := filepath.Join(t.TempDir(), "lockcluster.yaml")
	if err := os.WriteFile(config, []byte("auth:\n  admin-tokens: [\""+adminToken+"\"]\n  namespaces:\n    a:\n      tokens: [\""+tokenA+"\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pc := startProcsWith(t, 3, func(string) []string { return []string{"--config", config} }, []lockcluster.Option{lockcluster.WithToken(adminToken)})
	pc.directoryComplete(10 * time.Second)
	file := filepath.Join(t.TempDir(), "backup.snap")
	if out, code := run(t, pc, "snapshot", "save", file, "--token", tokenA); code != exitNoPerm {
		t.Fatalf("a namespace token: exit %d: %s", code, out)
	}
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused save left %s: %v", file, err)
	}
	follower := pc.Nodes[(pc.leader(5*time.Second)+1)%3].GRPC
	if out, code := run(t, pc, "snapshot", "save", file, "--token", adminToken, "--addr", follower); code != 0 {
		t.Fatalf("an admin token via a follower: exit %d: %s", code, out)
	}
}

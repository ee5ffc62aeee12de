package main

import (
	"bytes"
	"context"
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
	"github.com/lockcluster/lockcluster/internal/testutil"
)

// A cluster of three loses two nodes for good. The third, stopped, is
// recovered as a one-node cluster ('lockcluster recover'): started as
// before, it leads alone with every lock, queue and token it had, takes new
// writes above them, and two wiped nodes join it, all three applying the
// same history. Before that, an offline backup of it ('snapshot save
// --data-dir') holds the same locks, and both commands refuse the
// directory while the node runs.
func TestRecoverAfterLosingAMajority(t *testing.T) {
	pc := startProcs(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Long TTLs: the sessions must outlive the outage.
	ttl, before, maxToken := holdSome(t, ctx, pc)
	// The survivor has every committed entry: this test is not about
	// what a lagging survivor loses (README, Operations, says).
	pc.directoryComplete(10 * time.Second)
	if err := pc.CaughtUp(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}

	// The leader and one follower are lost for good.
	survivor := (pc.leader(5*time.Second) + 1) % 3
	sv := pc.Nodes[survivor]
	var lost []int
	for i := range pc.Nodes {
		if i != survivor {
			pc.kill(i)
			if err := os.RemoveAll(pc.Nodes[i].Dir); err != nil {
				t.Fatal(err)
			}
			lost = append(lost, i)
		}
	}

	// Neither offline command touches a running node's directory.
	file := filepath.Join(t.TempDir(), "offline.snap")
	for _, args := range [][]string{{"recover", "--data-dir", sv.Dir, "--id", sv.ID}, {"snapshot", "save", file, "--data-dir", sv.Dir}} {
		if out, code := run(t, pc, args...); code != exitFailure || !strings.Contains(out, "in use by process") {
			t.Fatalf("%s on a running node: exit %d: %s", args[0], code, out)
		}
	}
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused save left %s: %v", file, err)
	}
	pc.terminate(survivor)

	// An offline backup of the stopped survivor holds the same locks.
	out, code := run(t, pc, "snapshot", "save", file, "--data-dir", sv.Dir, "-o", "json")
	var saved struct {
		lockcluster.SnapshotInfo
		LogIndex uint64 `json:"logIndex"`
		Held     int    `json:"held"`
		Pending  int    `json:"pending"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &saved) != nil || saved.Index < maxToken || saved.LogIndex < saved.Index ||
		saved.Held != 3 || saved.Pending != 1 {
		t.Fatalf("offline snapshot save: exit %d: %s", code, out)
	}
	info, state, err := loadSnapshotFile(file)
	if err != nil || info.Index != saved.Index || info.SHA256 != saved.SHA256 {
		t.Fatalf("reading the offline backup: %+v, %v; saved %+v", info, err, saved)
	}
	m := fsm.New()
	if err := m.Restore(bytes.NewReader(state)); err != nil {
		t.Fatal(err)
	}
	if q := m.Query("default"); !sameFSMLocks(before.Held, q.Held) || !sameFSMLocks(before.Pending, q.Pending) {
		t.Fatalf("the offline backup's locks differ:\nbefore %+v\nbackup %+v", before, q)
	}
	if out, code := restore(t, file, filepath.Join(t.TempDir(), "restored"), "-o", "json"); code != 0 || !strings.Contains(out, `"held": 3`) {
		t.Fatalf("snapshot restore of the offline backup: exit %d: %s", code, out)
	}

	// Recover it.
	out, code = run(t, pc, "recover", "--data-dir", sv.Dir, "--id", sv.ID, "-o", "json")
	var rec struct {
		RaftAddr, GRPCAddr   string
		Index, SnapshotIndex uint64
		Before, After        []struct{ ID, RaftAddr, Suffrage string }
		Held, Pending        int
	}
	if code != 0 || json.Unmarshal([]byte(out), &rec) != nil {
		t.Fatalf("recover: exit %d: %s", code, out)
	}
	if rec.RaftAddr != sv.Raft || rec.GRPCAddr != sv.GRPC || rec.Index < saved.LogIndex || len(rec.Before) != 3 ||
		len(rec.After) != 1 || rec.After[0].ID != sv.ID || rec.After[0].RaftAddr != sv.Raft || rec.After[0].Suffrage != "Voter" ||
		rec.Held != 3 || rec.Pending != 1 {
		t.Fatalf("recover said: %s", out)
	}
	// Again, in words: it says what it did and what to do next.
	out, code = run(t, pc, "recover", "--data-dir", sv.Dir, "--id", sv.ID)
	for _, want := range []string{"a one-node cluster of " + sv.ID, "taken as committed", "--join " + sv.GRPC, "lockcluster serve --id " + sv.ID} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("recover, again: exit %d, no %q in:\n%s", code, want, out)
		}
	}

	// Started as before (its --bootstrap is ignored), it leads alone.
	pc.start(survivor)
	if got := pc.leader(15 * time.Second); got != survivor {
		t.Fatalf("node %d leads; want the survivor, %d", got, survivor)
	}
	admin, err := lockcluster.DialAdmin([]string{sv.GRPC})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if ms, err := admin.Members(ctx); err != nil || len(ms) != 1 || ms[0].ID != sv.ID || !ms[0].Leader {
		t.Fatalf("members after the recovery: %+v, %v", ms, err)
	}
	after := queryJSON(t, pc)
	if !sameLocks(before.Held, after.Held) || !sameLocks(before.Pending, after.Pending) {
		t.Fatalf("the recovered locks differ:\nbefore %+v\nafter  %+v", before, after)
	}
	n := dialT(t, []string{sv.GRPC}, ttl)
	l, err := n.Acquire(ctx, "new", lockcluster.Options{})
	if err != nil || l.Token() <= rec.Index || l.Token() <= maxToken {
		t.Fatalf("a new grant: %v, token %d; want above %d", err, tokenOf(l), rec.Index)
	}
	if _, err := n.Acquire(ctx, "x", lockcluster.Options{IfAvailable: true}); !errors.Is(err, lockcluster.ErrNotAvailable) {
		t.Fatalf("x, held before the loss: %v, want not available", err)
	}

	// The lost nodes come back wiped and join it.
	for _, i := range lost {
		p := pc.Nodes[i]
		k := slices.Index(p.Args, "--bootstrap")
		p.Args = append(slices.Delete(slices.Clone(p.Args), k, k+2), "--join", sv.GRPC)
		pc.start(i)
	}
	testutil.Eventually(t, 30*time.Second, "three voters", func() bool {
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		defer ccancel()
		ms, err := admin.Members(cctx)
		return err == nil && len(ms) == 3 && !slices.ContainsFunc(ms, func(m lockcluster.Member) bool { return m.Suffrage != "Voter" })
	})
	pc.directoryComplete(20 * time.Second)
	if err := pc.CaughtUp(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, p := range pc.Nodes {
		testutil.Eventually(t, 10*time.Second, p.ID+" to hold the recovered state", func() bool {
			st := statusOf(t, p.GRPC)
			return st.Held == 4 && st.Pending == 1
		})
	}
	problem, notes := compareAppliedHashes(pc.RunningHTTP(), 10*time.Second)
	if problem != "" || !slices.ContainsFunc(notes, func(s string) bool { return strings.HasPrefix(s, "compared at index") && strings.Count(s, "node") == 3 }) {
		t.Fatalf("applied hashes: %s %q", problem, notes)
	}
}

// sameFSMLocks compares a query's locks with the state machine's own
// (name, session, request, token).
func sameFSMLocks(a []lockcluster.LockInfo, b []fsm.LockInfo) bool {
	return slices.EqualFunc(a, b, func(x lockcluster.LockInfo, y fsm.LockInfo) bool {
		return x.Name == y.Name && x.SessionID == y.Session && x.RequestID == y.RequestID && x.Token == y.Token
	})
}

// The offline commands refuse, saying why, a directory without raft state,
// and create nothing there; recover wants --data-dir.
func TestRecoverRefusesWithoutState(t *testing.T) {
	bin := binary(t)
	empty := t.TempDir()
	for _, args := range [][]string{
		{"recover", "--data-dir", empty, "--id", "node0"},
		{"snapshot", "save", filepath.Join(empty, "x.snap"), "--data-dir", empty},
	} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if code := exitCode(err); code != exitFailure || !strings.Contains(string(out), "holds no raft state") {
			t.Errorf("%s on an empty directory: exit %d: %s", args[0], code, out)
		}
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Errorf("the refused commands left %v", entries)
	}
	if out, err := exec.Command(bin, "recover", "--id", "node0").CombinedOutput(); exitCode(err) != exitUsage {
		t.Errorf("recover without --data-dir: exit %d: %s", exitCode(err), out)
	}
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/proccluster"
	"github.com/lockcluster/lockcluster/internal/testutil"
)

// growingCluster lays out n nodes of which the first three bootstrap the
// cluster and start; the others are set to join it through node0 (serve
// --join) and wait for pc.start.
func growingCluster(t *testing.T, n int) *procCluster {
	t.Helper()
	c, err := proccluster.New(proccluster.Config{Bin: binary(t), Nodes: n, Dir: t.TempDir(), Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	pc := &procCluster{Cluster: c, t: t, bin: c.Bin}
	var peers []string
	for _, p := range c.Nodes[:3] {
		peers = append(peers, p.ID+"="+p.Raft)
	}
	for i, p := range c.Nodes {
		k := slices.Index(p.Args, "--bootstrap")
		if i < 3 {
			p.Args[k+1] = strings.Join(peers, ",")
			continue
		}
		p.Args = append(slices.Delete(slices.Clone(p.Args), k, k+2), "--join", c.Nodes[0].GRPC)
	}
	t.Cleanup(func() {
		checkAppliedHashes(t, pc.RunningHTTP())
		pc.Stop()
		if t.Failed() {
			for _, p := range pc.Nodes {
				b, _ := os.ReadFile(p.Log)
				t.Logf("--- %s log:\n%s", p.ID, b)
			}
		}
	})
	for i := range 3 {
		pc.start(i)
	}
	pc.leader(15 * time.Second)
	return pc
}

// learnerMembers is 'lockcluster members -o json' through the first three
// nodes, by id.
func learnerMembers(t *testing.T, pc *procCluster) map[string]lockcluster.Member {
	t.Helper()
	out, code := run(t, pc, "members", "-o", "json", "--addr", strings.Join(pc.addrs()[:3], ","))
	var ms []lockcluster.Member
	if code != 0 || json.Unmarshal([]byte(out), &ms) != nil {
		t.Fatalf("members: exit %d: %s", code, out)
	}
	byID := map[string]lockcluster.Member{}
	for _, m := range ms {
		byID[m.ID] = m
	}
	return byID
}

// writeLoad is clients locking and releasing their own names in a loop until
// stopped; every call must complete without an error.
type writeLoad struct {
	calls  atomic.Int64
	mu     sync.Mutex
	errs   []error
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startWriteLoad(t *testing.T, addrs []string, clients int) *writeLoad {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ld := &writeLoad{cancel: cancel}
	for i := range clients {
		c := dialT(t, addrs, lockcluster.WithLabel(fmt.Sprintf("load%d", i)))
		ld.wg.Add(1)
		go func() {
			defer ld.wg.Done()
			name := fmt.Sprintf("load-%d", i)
			for ctx.Err() == nil {
				// A call's own deadline: generous, so that a slow call is
				// still a completed one; one that does not complete fails.
				cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
				l, err := c.Acquire(cctx, name, lockcluster.Options{})
				if err == nil {
					err = l.Release(cctx)
				}
				ccancel()
				if err != nil {
					ld.mu.Lock()
					ld.errs = append(ld.errs, err)
					ld.mu.Unlock()
					return
				}
				ld.calls.Add(2)
			}
		}()
	}
	return ld
}

// stop ends the load and returns the calls completed and the errors.
func (ld *writeLoad) stop() (int64, []error) {
	ld.cancel()
	ld.wg.Wait()
	return ld.calls.Load(), ld.errs
}

// growLog writes at least n entries to the log through addrs (locks taken
// and released by a few clients at once).
func growLog(t *testing.T, pc *procCluster, addrs []string, n uint64) {
	t.Helper()
	start := leaderStatus(t, addrs).CommitIndex
	ld := startWriteLoad(t, addrs, 4)
	testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("%d more entries in the log", n), func() bool {
		return leaderStatus(t, addrs).CommitIndex >= start+n
	})
	if _, errs := ld.stop(); len(errs) > 0 {
		t.Fatalf("writing the log: %v", errs)
	}
}

// behindRE is how far a refused promotion says the learner is behind.
var behindRE = regexp.MustCompile(`at least (\d+) entries behind|is (\d+) entries behind`)

// A fourth node joins a loaded three-node cluster as a learner (join's
// default) with thousands of entries to catch up: every client call made
// meanwhile completes, members shows it as a learner, and the leader
// promotes it by itself once it has caught up. A fifth node joined with
// --no-promote is paused far behind: promote refuses it, naming how far;
// resumed and caught up, promote makes it a voter. The applied hashes of
// all five agree.
func TestLearnerJoinUnderLoad(t *testing.T) {
	pc := growingCluster(t, 5)
	voters := pc.addrs()[:3]
	growLog(t, pc, voters, 3000) // the learner's log to catch up

	ld := startWriteLoad(t, voters, 3)
	n3 := pc.Nodes[3]
	out, code := run(t, pc, "join", "--id", n3.ID, "--raft-addr", n3.Raft, "--grpc-addr", n3.GRPC, "--http-addr", n3.HTTP, "--addr", strings.Join(voters, ","))
	if code != 0 || !strings.Contains(out, "joined as a learner (3 voters)") {
		t.Fatalf("join %s: exit %d: %s", n3.ID, code, out)
	}
	// Not started yet: a learner whatever the leader's probes say.
	if m := learnerMembers(t, pc)[n3.ID]; m.Role != "learner" || m.Suffrage != "Nonvoter" || m.PromoteWithin == 0 || m.NoPromote {
		t.Fatalf("%s after join: %+v: want a learner promoted automatically", n3.ID, m)
	}
	out, code = run(t, pc, "members", "--addr", strings.Join(voters, ","))
	if code != 0 || !regexp.MustCompile(`(?m)^`+n3.ID+`\s+follower\s+Learner\s`).MatchString(out) {
		t.Fatalf("members table: exit %d: want %s as a Learner:\n%s", code, n3.ID, out)
	}
	pc.start(3) // serve --join: already a learner, it stays one
	testutil.Eventually(t, 2*time.Minute, n3.ID+" promoted to voter", func() bool {
		return learnerMembers(t, pc)[n3.ID].Role == "voter"
	})
	calls, errs := ld.stop()
	if len(errs) > 0 {
		t.Fatalf("client calls during the join failed (%d completed): %v", calls, errs)
	}
	if calls == 0 {
		t.Fatal("no client call completed during the join")
	}
	t.Logf("%d client calls completed while %s joined and caught up", calls, n3.ID)
	if !strings.Contains(nodeLog(t, pc, pc.leader(5*time.Second)), "learner promoted to voter") {
		t.Errorf("the leader's log does not say it promoted %s", n3.ID)
	}

	// By hand: a --no-promote learner, paused far behind.
	n4 := pc.Nodes[4]
	voters = pc.addrs()[:4]
	out, code = run(t, pc, "join", "--no-promote", "--id", n4.ID, "--raft-addr", n4.Raft, "--grpc-addr", n4.GRPC, "--http-addr", n4.HTTP, "-o", "json", "--addr", strings.Join(voters, ","))
	var jr struct {
		Learner bool
		Voters  int
	}
	if code != 0 || json.Unmarshal([]byte(out), &jr) != nil || !jr.Learner || jr.Voters != 4 {
		t.Fatalf("join --no-promote %s: exit %d: %s", n4.ID, code, out)
	}
	pc.start(4)
	testutil.Eventually(t, time.Minute, n4.ID+" caught up, waiting to be promoted by hand", func() bool {
		m := learnerMembers(t, pc)[n4.ID]
		return m.Role == "learner" && m.NoPromote && m.Probed && m.Reachable && m.Unfit == "" && m.Lag <= m.PromoteWithin
	})
	if err := pc.Pause(4); err != nil {
		t.Fatal(err)
	}
	growLog(t, pc, voters, 1500)
	testutil.Eventually(t, 30*time.Second, "the leader to see "+n4.ID+" unreachable", func() bool {
		return !learnerMembers(t, pc)[n4.ID].Reachable
	})
	out, code = run(t, pc, "promote", n4.ID, "--addr", strings.Join(voters, ","))
	mm := behindRE.FindStringSubmatch(out)
	if code != exitFailure || mm == nil || !strings.Contains(out, "--force") {
		t.Fatalf("promote a paused learner far behind: exit %d: %s\nwant exit %d naming how far behind", code, out, exitFailure)
	}
	t.Logf("promote %s, paused: %s", n4.ID, strings.TrimSpace(out))
	if behind, _ := strconv.Atoi(mm[1] + mm[2]); behind <= 1000 {
		t.Fatalf("the refusal says %d entries behind, after 1,500 entries written: %s", behind, out)
	}
	if m := learnerMembers(t, pc)[n4.ID]; m.Role != "learner" {
		t.Fatalf("%s after a refused promote: %+v", n4.ID, m)
	}
	if err := pc.Resume(4); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "promote "+n4.ID+" once caught up", func() bool {
		out, code = run(t, pc, "promote", n4.ID, "--addr", strings.Join(voters, ","))
		return code == 0
	})
	if !strings.Contains(out, "promoted to voter (5 voters)") {
		t.Fatalf("promote %s: %s", n4.ID, out)
	}
	ms := learnerMembers(t, pc)
	for _, p := range pc.Nodes {
		if ms[p.ID].Role != "voter" {
			t.Fatalf("%s: %+v: want a voter", p.ID, ms[p.ID])
		}
	}
	if err := pc.CaughtUp(context.Background(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	problem, notes := compareAppliedHashes(pc.RunningHTTP(), 10*time.Second)
	if problem != "" || !slices.ContainsFunc(notes, func(s string) bool { return strings.HasPrefix(s, "compared at index") && strings.Count(s, "node") == 5 }) {
		t.Fatalf("applied hashes: %s %q", problem, notes)
	}
}

// nodeLog is node i's log so far.
func nodeLog(t *testing.T, pc *procCluster, i int) string {
	t.Helper()
	b, err := os.ReadFile(pc.Nodes[i].Log)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// members shows a learner as such, and how far it is from its promotion
// in HEALTH (a learner catching up is fenced as behind: that is its state,
// not a failure status reports); -o json has its role.
func TestMembersTableShowsLearners(t *testing.T) {
	now := time.Now()
	behind := "this replica has applied the log up to index 2, short of commit index 41252 that the leader announced 6s ago (it announces 41252 now): it serves no clients until it catches up"
	learner := func(id string, lag uint64, unfit string, noPromote bool) lockcluster.Member {
		return lockcluster.Member{ID: id, Suffrage: "Nonvoter", Role: "learner", Probed: true, Reachable: true, LastContact: now,
			Lag: lag, Unfit: unfit, PromoteWithin: 1000, NoPromote: noPromote}
	}
	ms := []lockcluster.Member{
		{ID: "n1", Leader: true, Suffrage: "Voter", Role: "voter", Probed: true, Reachable: true, LastContact: now},
		learner("n2", 41250, behind, false),
		learner("n3", 12, "", false),
		learner("n4", 5000, "", true),
		learner("n5", 0, "", true),
	}
	var b strings.Builder
	if err := writeMembers(&b, ms); err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		"n1": {"Voter", "ok"},
		"n2": {"Learner", "catching up: 41250 behind"},
		"n3": {"Learner", "caught up (12 behind): promoting"},
		"n4": {"Learner", "catching up: 5000 behind; then promote by hand"},
		"n5": {"Learner", "caught up (0 behind): promote by hand"},
	}
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n")[1:] {
		f := strings.Fields(line)
		w := want[f[0]]
		if f[2] != w[0] || !strings.HasSuffix(line, w[1]) {
			t.Errorf("%s's row: %q, want SUFFRAGE %s and HEALTH %q", f[0], line, w[0], w[1])
		}
	}
	if err := membersVerdict(ms); err != nil {
		t.Errorf("status's verdict on learners catching up: %v, want none", err)
	}
	ms[2].Unfit = "this replica's applied history diverged from the leader's at index 9"
	if err := membersVerdict(ms); err == nil || !strings.Contains(err.Error(), "n3 fenced: diverged") {
		t.Errorf("status's verdict on a diverged learner: %v", err)
	}
}

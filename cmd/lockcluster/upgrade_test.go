package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/proccluster"
	"github.com/lockcluster/lockcluster/internal/testutil"
)

// Rolling upgrades (README "Upgrading"; the protocol levels of
// fsm/level.go and the gate of internal/server/level.go).

// previousRelease is the commit of the release before protocol levels
// (fsm.LevelBase): checkpoints, anchors, envelope 2, snapshot format 2,
// no cluster secret.
const previousRelease = "d704a4c7801fe935a27fb2d49fb86e25597013de"

// previousVersion is the version the previous release's binary reports.
const previousVersion = "d704a4c"

// buildPreviousRelease builds the previous release's lockcluster from this
// clone's history, into a directory removed when the test ends. It skips
// the test when the history does not hold the commit (a shallow clone);
// a build that fails skips it too, except under CI, where it fails.
func buildPreviousRelease(t *testing.T) string {
	t.Helper()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("the previous release is built from git history, and this is no git work tree: %v", err)
	}
	repo := strings.TrimSpace(string(root))
	if err := exec.Command("git", "-C", repo, "cat-file", "-e", previousRelease+"^{commit}").Run(); err != nil {
		t.Skipf("commit %s (the previous release) is not in this clone's history (a shallow clone? git fetch --unshallow): %v", previousRelease[:7], err)
	}
	fail := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") != "" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
	}
	src := t.TempDir()
	archive, err := exec.Command("git", "-C", repo, "archive", "--format=tar", previousRelease).Output()
	if err != nil {
		fail("git archive %s: %v", previousRelease[:7], err)
	}
	if err := unpackTar(bytes.NewReader(archive), src); err != nil {
		fail("unpacking the previous release: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "lockcluster-"+previousVersion)
	cmd := exec.Command("go", "build", "-tags", "hashicorpmetrics", "-ldflags", "-X main.version="+previousVersion, "-o", bin, "./cmd/lockcluster")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		fail("building the previous release (%s): %v\n%s", previousRelease[:7], err, out)
	}
	return bin
}

// unpackTar unpacks a tar stream of regular files and directories into dir.
func unpackTar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(name, filepath.Clean(dir)+string(os.PathSeparator)) {
			return fmt.Errorf("%q is outside the archive's directory", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(name, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

// secretDrawn is the line a leader logs when it draws the cluster secret
// (internal/server/member.go); secretWaits, when its draw waits for the
// protocol level (keepDrawing).
const (
	secretDrawn = "drew the cluster secret"
	secretWaits = "the cluster secret waits for the cluster's protocol level"
)

// logsSaying lists the nodes whose logs hold s.
func logsSaying(pc *procCluster, s string) []string {
	var out []string
	for _, n := range pc.Nodes {
		if b, _ := os.ReadFile(n.Log); bytes.Contains(b, []byte(s)) {
			out = append(out, fmt.Sprintf("%s (%d times)", n.ID, bytes.Count(b, []byte(s))))
		}
	}
	return out
}

// upgradeLoad is clients locking and releasing in a loop until stopped,
// counting what fails beyond the client's own retries.
type upgradeLoad struct {
	ops, errs atomic.Int64
	mu        sync.Mutex
	lastErr   error
	stop      chan struct{}
	wg        sync.WaitGroup
}

func startUpgradeLoad(t *testing.T, addrs []string, clients int) *upgradeLoad {
	ld := &upgradeLoad{stop: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for i := range clients {
		c := dialT(t, addrs, lockcluster.WithLabel(fmt.Sprintf("upgrade-load-%d", i)))
		ld.wg.Add(1)
		go func() {
			defer ld.wg.Done()
			for n := 0; ; n++ {
				select {
				case <-ld.stop:
					return
				default:
				}
				// Two clients per name: requests queue behind each other.
				name := fmt.Sprintf("u%d", (i+n)%(clients/2+1))
				rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
				err := c.Request(rctx, name, lockcluster.Options{}, func(context.Context, *lockcluster.Lock) error { return nil })
				rcancel()
				ld.ops.Add(1)
				if err != nil {
					ld.errs.Add(1)
					ld.mu.Lock()
					ld.lastErr = fmt.Errorf("client %d, %s: %w", i, name, err)
					ld.mu.Unlock()
				}
			}
		}()
	}
	return ld
}

// progress waits for n more operations.
func (ld *upgradeLoad) progress(t *testing.T, n int64, what string) {
	t.Helper()
	want := ld.ops.Load() + n
	testutil.Eventually(t, 60*time.Second, fmt.Sprintf("%d more operations %s", n, what), func() bool { return ld.ops.Load() >= want })
}

func (ld *upgradeLoad) end() (ops, errs int64, last error) {
	close(ld.stop)
	ld.wg.Wait()
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.ops.Load(), ld.errs.Load(), ld.lastErr
}

// membersJSON is 'lockcluster members -o json'.
func membersJSON(t *testing.T, pc *procCluster) map[string]lockcluster.Member {
	t.Helper()
	out, code := run(t, pc, "members", "-o", "json")
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

// A cluster of the previous release is upgraded one node at a time, under
// load: the followers first, the leader last, each stopped (SIGTERM) and
// started again on its data directory with this build. No client call
// fails; members shows each node's version and level before the next is
// upgraded; the cluster secret, an entry of level 2, is drawn only once
// every member runs this build; and the replicas' applied hashes agree.
func TestUpgradeFromThePreviousReleaseUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the previous release and upgrades a 3-node cluster under load (about a minute); -short skips it")
	}
	oldBin := buildPreviousRelease(t)
	newBin := binary(t)
	pc := startProcsConfig(t, proccluster.Config{Bin: newBin, Nodes: 3, Dir: t.TempDir(), Keep: true,
		NodeBin: func(int) string { return oldBin }, StartMarker: "upgrade test"})
	pc.directoryComplete(20 * time.Second)
	for id, m := range membersJSON(t, pc) {
		if m.Version != previousVersion || m.Level != 1 {
			t.Fatalf("before the upgrade, %s: version %q, level %d; want %s, level 1 (a release before levels says none)", id, m.Version, m.Level, previousVersion)
		}
	}

	ld := startUpgradeLoad(t, pc.addrs(), 4)
	ld.progress(t, 50, "before the upgrade")

	upgrade := func(i int) {
		t.Helper()
		n := pc.Nodes[i]
		t.Logf("upgrading %s", n.ID)
		pc.terminate(i)
		n.Bin = newBin
		pc.start(i)
		testutil.Eventually(t, 30*time.Second, n.ID+" to answer as this build", func() bool {
			a, err := lockcluster.DialAdmin([]string{n.GRPC})
			if err != nil {
				return false
			}
			defer a.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			st := a.Status(ctx)
			return len(st) == 1 && st[0].Err == "" && st[0].Level == fsm.ProtocolLevel && st[0].Version != previousVersion
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := pc.CaughtUp(ctx, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		// What the README asks an operator to check before the next node
		// (the leader's probe, once a second, may still say the version
		// the node had before).
		var m lockcluster.Member
		testutil.Eventually(t, 10*time.Second, "members to show "+n.ID+" upgraded", func() bool {
			m = membersJSON(t, pc)[n.ID]
			return m.Level == fsm.ProtocolLevel && m.Version != previousVersion && m.Reachable
		})
		ld.progress(t, 50, "after upgrading "+n.ID)
	}

	leader := pc.leader(10 * time.Second)
	var order []int
	for i := range pc.Nodes {
		if i != leader {
			order = append(order, i)
		}
	}
	for _, i := range order {
		upgrade(i)
		if got := logsSaying(pc, secretDrawn); len(got) > 0 {
			t.Fatalf("the cluster secret was drawn while a node runs the previous release: %v", got)
		}
	}

	// The last node (the leader, unless leadership moved). While it is
	// down, a leader of this build leads a configuration with a member not
	// heard from: the secret must wait, and says so.
	last := 3 - order[0] - order[1]
	t.Logf("upgrading the last node, %s (the leader at the start: %s)", pc.Nodes[last].ID, pc.Nodes[leader].ID)
	pc.terminate(last)
	next := pc.leader(30 * time.Second)
	testutil.Eventually(t, 30*time.Second, "the new leader to wait for the level", func() bool {
		b, _ := os.ReadFile(pc.Nodes[next].Log)
		return bytes.Contains(b, []byte(secretWaits)) || len(logsSaying(pc, secretDrawn)) > 0
	})
	ld.progress(t, 20, "while the last node is down")
	if got := logsSaying(pc, secretDrawn); len(got) > 0 {
		t.Fatalf("the cluster secret was drawn while a member was not heard from: %v", got)
	}
	pc.Nodes[last].Bin = newBin
	pc.start(last)
	testutil.Eventually(t, 30*time.Second, "the cluster secret drawn once every member runs this build", func() bool {
		return len(logsSaying(pc, secretDrawn)) > 0
	})
	if got := logsSaying(pc, secretDrawn); len(got) != 1 || !strings.HasSuffix(got[0], "(1 times)") {
		t.Fatalf("the secret was drawn: %v; want once", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pc.CaughtUp(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	ld.progress(t, 50, "after the upgrade")

	// Every node runs this build at its level (fsm.ProtocolLevel), and the leader says the
	// cluster does.
	for id, m := range membersJSON(t, pc) {
		if m.Level != fsm.ProtocolLevel || m.Version == previousVersion {
			t.Errorf("after the upgrade, %s: version %q, level %d", id, m.Version, m.Level)
		}
	}
	out, code := run(t, pc, "status", "-o", "json")
	var sts []lockcluster.Status
	if code != 0 || json.Unmarshal([]byte(out), &sts) != nil || len(sts) != 3 {
		t.Fatalf("status: exit %d: %s", code, out)
	}
	leaders := 0
	for _, s := range sts {
		if s.ClusterLevel != 0 {
			leaders++
			if s.ClusterLevel != fsm.ProtocolLevel || s.State != "Leader" {
				t.Errorf("status of %s: cluster level %d, state %s", s.NodeID, s.ClusterLevel, s.State)
			}
		}
	}
	if leaders != 1 {
		t.Errorf("%d nodes report a cluster level: %s", leaders, out)
	}

	ops, errs, last2 := ld.end()
	t.Logf("%d operations across the upgrade", ops)
	if errs > 0 {
		t.Fatalf("%d of %d client operations failed across the rolling upgrade; last: %v", errs, ops, last2)
	}
	checkAppliedHashes(t, pc.RunningHTTP())
}

// members and status show each node's protocol level; status shows the
// cluster's on the leader.
func TestMembersAndStatusShowLevels(t *testing.T) {
	var b bytes.Buffer
	ms := []lockcluster.Member{
		{ID: "n1", Leader: true, Suffrage: "Voter", Version: "v2", Level: 2, Probed: true, Reachable: true},
		{ID: "n2", Suffrage: "Voter", Version: "v1", Level: 1, Probed: true, Reachable: true},
		{ID: "n3", Suffrage: "Voter"},
	}
	if err := writeMembers(&b, ms); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	if f := strings.Fields(lines[0]); len(f) < 8 || f[7] != "LEVEL" {
		t.Fatalf("members header: %q", lines[0])
	}
	for i, want := range []string{"2", "1", "?"} {
		if f := strings.Fields(lines[i+1]); len(f) < 5 || !strings.Contains(lines[i+1], " "+want+" ") {
			t.Errorf("members row %d: %q, want level %s", i, lines[i+1], want)
		}
	}
	b.Reset()
	sts := []lockcluster.Status{
		{NodeID: "n1", Addr: "a1", State: "Leader", Version: "v2", Level: 2, ClusterLevel: 1},
		{NodeID: "n2", Addr: "a2", State: "Follower", Version: "v1", Level: 1},
		{Addr: "a3", Err: "unreachable"},
	}
	if err := writeStatus(&b, sts); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(strings.Split(out, "\n")[0], "LEVEL") || !strings.Contains(out, "2 (cluster 1)") {
		t.Fatalf("status table:\n%s", out)
	}
	var back []lockcluster.Status
	b.Reset()
	if err := printJSON(&b, sts); err != nil || json.Unmarshal(b.Bytes(), &back) != nil || back[0].ClusterLevel != 1 || back[1].Level != 1 {
		t.Fatalf("status -o json: %v %s", err, b.String())
	}
}

//go:build linux

package composetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
)

// The test's cluster is docker-compose.yml with every name a user's
// `docker compose up` (or test/jepsen-lite --docker) would use changed:
// its own compose project, container names, network name and subnet, and
// host ports picked free, so it neither collides with a cluster the user
// runs nor skips because `lockcluster dev` holds 7700.
const (
	project   = "lockcluster-e2e" // volumes are lockcluster-e2e_node0-data...
	prefix    = "lockcluster-e2e-"
	network   = "lockcluster-e2e"
	subnet    = "172.31.79." // the compose file's 172.31.77.
	namespace = "docker-e2e"
	// lockFile serialises runs of this test (its names are fixed) with
	// flock(2).
	lockFile = "lockcluster-e2e-docker.lock"
)

var containers = []string{prefix + "node0", prefix + "node1", prefix + "node2"}

// testCompose writes the test's compose file, from docker-compose.yml,
// into dir, with the host's gRPC and HTTP ports of node i at grpc[i] and
// http[i]. It fails when the file no longer has what it rewrites.
func testCompose(t *testing.T, root, dir string, grpc, http []string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	replace := func(old, new string, want int) {
		t.Helper()
		if n := strings.Count(s, old); n != want {
			t.Fatalf("docker-compose.yml has %d of %q, the test expects %d: update testCompose", n, old, want)
		}
		s = strings.ReplaceAll(s, old, new)
	}
	replace("container_name: lockcluster-node", "container_name: "+prefix+"node", 3)
	replace("    name: lockcluster\n", "    name: "+network+"\n", 1)
	replace("172.31.77.", subnet, 6)
	for i := range 3 {
		replace(fmt.Sprintf(`"127.0.0.1:77%d0:7700"`, i), fmt.Sprintf(`"%s:7700"`, grpc[i]), 1)
		replace(fmt.Sprintf(`"127.0.0.1:77%d2:7702"`, i), fmt.Sprintf(`"%s:7702"`, http[i]), 1)
	}
	path := filepath.Join(dir, "docker-compose.yml")
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// run runs a command with its own time limit and returns its combined output.
func run(ctx context.Context, limit time.Duration, dir string, env []string, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, out.String())
	}
	return out.String(), err
}

// composeTool is `docker compose` (v2) or `docker-compose` (v1), whichever
// works, or nil.
func composeTool(ctx context.Context) []string {
	for _, argv := range [][]string{{"docker", "compose"}, {"docker-compose"}} {
		if _, err := exec.LookPath(argv[0]); err != nil {
			continue
		}
		if _, err := run(ctx, 30*time.Second, "", nil, append(argv, "version")...); err == nil {
			return argv
		}
	}
	return nil
}

// lockDocker takes the cross-process lock, waiting up to wait, or skips.
func lockDocker(t *testing.T, wait time.Duration) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), lockFile), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			t.Fatalf("flock %s: %v", f.Name(), err)
		}
		if time.Now().After(deadline) {
			f.Close()
			t.Skipf("another test has held %s (the compose cluster) for %s", f.Name(), wait)
		}
		time.Sleep(time.Second)
	}
	t.Cleanup(func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
}

// TestDockerCompose builds the image, starts the compose cluster, takes and
// releases locks from the host with the Go client and the CLI, kills the
// leader's container, checks that locks still work and the held one
// survived, restarts the node, and removes everything (down -v).
func TestDockerCompose(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the Docker cluster test")
	}
	if v := os.Getenv("LOCKCLUSTER_SKIP_DOCKER"); v != "" {
		t.Skipf("LOCKCLUSTER_SKIP_DOCKER=%s", v)
	}
	root := repoRoot(t)
	// Rerun when the binary's sources or the Docker files change.
	consult(t, root, func(rel string, _ fs.DirEntry) bool {
		return dockerFile(rel) || rel == "go.mod" || rel == "go.sum" ||
			strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go") && !strings.HasPrefix(rel, "test/")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("no docker command")
	}
	if out, err := run(ctx, 30*time.Second, "", nil, "docker", "info", "--format", "{{.ServerVersion}}"); err != nil {
		t.Skipf("no Docker engine: %v", err)
	} else {
		t.Logf("Docker engine %s", strings.TrimSpace(out))
	}
	tool := composeTool(ctx)
	if tool == nil {
		t.Skip("neither `docker compose` nor `docker-compose` works")
	}
	t.Logf("compose tool: %s", strings.Join(tool, " "))
	lockDocker(t, 4*time.Minute)

	var endpoints, httpPorts []string
	for range 3 {
		for _, list := range []*[]string{&endpoints, &httpPorts} {
			addr, err := freePort(17000, 18000)
			if err != nil {
				t.Fatal(err)
			}
			*list = append(*list, addr)
		}
	}
	file := testCompose(t, root, t.TempDir(), endpoints, httpPorts)
	compose := func(limit time.Duration, args ...string) (string, error) {
		argv := append(append([]string{}, tool...), "-p", project, "-f", file)
		return run(context.Background(), limit, root, nil, append(argv, args...)...)
	}
	docker := func(limit time.Duration, args ...string) (string, error) {
		return run(ctx, limit, "", nil, append([]string{"docker"}, args...)...)
	}

	// Never touch a cluster that is not this test's: leftovers of an
	// aborted run of it are removed, anything else skips the test.
	for _, c := range containers {
		out, err := docker(30*time.Second, "ps", "-a", "--filter", "name=^/"+c+"$", "--format", `{{.Label "com.docker.compose.project"}}`)
		if err != nil {
			t.Fatal(err)
		}
		switch p := strings.TrimSpace(out); p {
		case "":
		case project:
			t.Logf("removing a previous run's containers")
			if out, err := compose(2*time.Minute, "down", "-v", "--remove-orphans", "-t", "5"); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		default:
			t.Skipf("container %s exists (compose project %q): a cluster started with `docker compose up`? Not touching it", c, p)
		}
	}
	if out, err := docker(30*time.Second, "network", "ls", "--filter", "name=^"+network+"$", "--format", `{{.Label "com.docker.compose.project"}}`); err != nil {
		t.Fatal(err)
	} else if p := strings.TrimSpace(out); p != "" && p != project {
		t.Skipf("network %s belongs to compose project %q; not touching it", network, p)
	}

	// The documented build command.
	start := time.Now()
	if _, err := run(ctx, 4*time.Minute, root, nil, filepath.Join(root, "scripts", "docker-build.sh")); err != nil {
		t.Fatal(err)
	}
	t.Logf("scripts/docker-build.sh: %s", time.Since(start).Round(100*time.Millisecond))

	t.Cleanup(func() {
		// SIGTERM first: a node should stop gracefully within a few seconds.
		start := time.Now()
		out, err := compose(time.Minute, "stop", "-t", "10")
		stop := time.Since(start)
		if err != nil {
			t.Errorf("stop: %v\n%s", err, out)
		}
		if t.Failed() || stop > 5*time.Second {
			out, _ := compose(time.Minute, "logs", "--no-color", "--tail", "150")
			t.Logf("compose logs:\n%s", out)
		}
		start = time.Now()
		if out, err := compose(2*time.Minute, "down", "-v", "--remove-orphans", "-t", "5"); err != nil {
			t.Errorf("down: %v\n%s", err, out)
		}
		t.Logf("stop: %s, down -v: %s", stop.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
	})
	start = time.Now()
	if _, err := compose(2*time.Minute, "up", "-d"); err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, ctx, 90*time.Second, containers...)
	t.Logf("up -d until all three are healthy: %s", time.Since(start).Round(100*time.Millisecond))

	// The Go client on the host, against the published ports.
	dial := func(label string) *lockcluster.Client {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		c, err := lockcluster.Dial(dctx, endpoints, lockcluster.WithNamespace(namespace), lockcluster.WithLabel(label))
		if err != nil {
			t.Fatalf("dial %v: %v", endpoints, err)
		}
		t.Cleanup(func() {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c.Close(cctx)
		})
		return c
	}
	a, b := dial("holder"), dial("other")
	opctx := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 30*time.Second) }

	c1, cancel1 := opctx()
	l, err := a.Acquire(c1, "door", lockcluster.Options{})
	cancel1()
	if err != nil {
		t.Fatalf("acquire door: %v", err)
	}
	t.Logf("door granted, token %d", l.Token())

	// The CLI on the host sees it.
	out, err := run(ctx, 30*time.Second, "", []string{"LOCKCLUSTER_ADDR=" + strings.Join(endpoints, ","), "LOCKCLUSTER_NAMESPACE=" + namespace},
		filepath.Join(root, "dist", "lockcluster"), "query", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var snap lockcluster.Snapshot
	if err := json.Unmarshal([]byte(out), &snap); err != nil {
		t.Fatalf("lockcluster query -o json: %v\n%s", err, out)
	}
	if len(snap.Held) != 1 || snap.Held[0].Name != "door" || snap.Held[0].Token != l.Token() || snap.Held[0].Label != "holder" {
		t.Fatalf("lockcluster query: %s\nwant door held by holder with token %d", out, l.Token())
	}

	notAvailable := func(what string) {
		t.Helper()
		c, cancel := opctx()
		defer cancel()
		if l2, err := b.Acquire(c, "door", lockcluster.Options{IfAvailable: true}); !errors.Is(err, lockcluster.ErrNotAvailable) {
			if l2 != nil {
				l2.Release(c)
			}
			t.Fatalf("%s: door ifAvailable: %v, want ErrNotAvailable", what, err)
		}
	}
	notAvailable("before the kill")

	// Kill the leader's container.
	leader := leaderID(t, ctx, endpoints)
	killed := prefix + leader
	start = time.Now()
	if _, err := docker(30*time.Second, "kill", killed); err != nil {
		t.Fatal(err)
	}
	// A request sent as the leader dies may be forwarded to it by a node
	// that has not noticed yet; that node's gRPC dial to the dead
	// container's address hangs (no RST from a vanished network namespace)
	// until gRPC's 20 s connect timeout. Hence the long limit.
	c2, cancel2 := context.WithTimeout(ctx, time.Minute)
	w, err := b.Acquire(c2, "window", lockcluster.Options{})
	cancel2()
	if err != nil {
		t.Fatalf("acquire window after killing %s: %v", killed, err)
	}
	failover := time.Since(start)
	t.Logf("killed the leader %s; a new lock granted %s later", killed, failover.Round(10*time.Millisecond))
	if failover > 5*time.Second {
		t.Logf("NOTE: failover took %s from the host's client (about 1 s with local processes)", failover.Round(100*time.Millisecond))
	}
	if err := l.Err(); err != nil {
		t.Fatalf("door was lost in the failover: %v", err)
	}
	notAvailable("after the kill")
	c3, cancel3 := opctx()
	defer cancel3()
	if err := w.Release(c3); err != nil {
		t.Fatalf("release window: %v", err)
	}
	if err := l.Release(c3); err != nil {
		t.Fatalf("release door: %v", err)
	}
	l2, err := b.Acquire(c3, "door", lockcluster.Options{})
	if err != nil {
		t.Fatalf("acquire door after its release: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("fencing token %d after %d: tokens must grow", l2.Token(), l.Token())
	}
	if err := l2.Release(c3); err != nil {
		t.Fatal(err)
	}

	// Restart the killed node: it comes back on its volume and catches up.
	start = time.Now()
	if _, err := docker(30*time.Second, "start", killed); err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, ctx, 60*time.Second, killed)
	caughtUp(t, ctx, 30*time.Second, endpoints)
	t.Logf("%s restarted, healthy and caught up in %s", killed, time.Since(start).Round(10*time.Millisecond))

	q, err := a.Query(c3)
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Held)+len(q.Pending) != 0 {
		t.Errorf("query after releasing everything: %+v", q)
	}
}

// waitHealthy waits until Docker reports the containers healthy.
func waitHealthy(t *testing.T, ctx context.Context, limit time.Duration, names ...string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		out, err := run(ctx, 30*time.Second, "", nil, append([]string{"docker", "inspect", "--format", "{{.Name}} {{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}"}, names...)...)
		last = out
		if err == nil && strings.Count(out, " running healthy") == len(names) {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("not healthy within %s:\n%s", limit, last)
}

// leaderID asks the nodes who leads.
func leaderID(t *testing.T, ctx context.Context, endpoints []string) string {
	t.Helper()
	a, err := lockcluster.DialAdmin(endpoints)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		sts := a.Status(c)
		cancel()
		for _, s := range sts {
			if s.Err == "" && s.State == "Leader" {
				return s.NodeID
			}
		}
	}
	t.Fatal("no leader")
	return ""
}

// caughtUp waits until every node has applied the leader's commit index.
func caughtUp(t *testing.T, ctx context.Context, limit time.Duration, endpoints []string) {
	t.Helper()
	a, err := lockcluster.DialAdmin(endpoints)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var sts []lockcluster.Status
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		sts = a.Status(c)
		cancel()
		var commit uint64
		ok := true
		for _, s := range sts {
			ok = ok && s.Err == "" && s.Unfit == ""
			if s.State == "Leader" {
				commit = s.CommitIndex
			}
		}
		for _, s := range sts {
			ok = ok && commit > 0 && s.AppliedIndex >= commit
		}
		if ok {
			return
		}
	}
	t.Fatalf("the nodes did not catch up within %s: %+v", limit, sts)
}

package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/proccluster"
	"github.com/lockcluster/lockcluster/internal/testutil"
)

// freeBase finds a base port whose dev ports (base+10i, +1, +2 for three
// nodes) are free and handed out to no other process (proccluster).
func freeBase(t *testing.T) int {
	t.Helper()
	base, err := proccluster.FreePorts("127.0.0.1", 23)
	if err != nil {
		t.Fatal(err)
	}
	return base
}

// devRun is a 'lockcluster dev' process and what it printed at start.
type devRun struct {
	cmd     *exec.Cmd
	lines   <-chan string // its stdout, line by line, after the start
	pids    []int
	addr    string
	dataDir string
}

// startDev starts 'lockcluster dev' on free ports with its temporary
// directory in a test's own, and waits for it to print LOCKCLUSTER_ADDR.
func startDev(t *testing.T, base int, extra ...string) *devRun {
	t.Helper()
	bin := binary(t)
	cmd := exec.Command(bin, append([]string{"dev", "--base-port", strconv.Itoa(base)}, extra...)...)
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	lines := make(chan string, 1000) // never full: dev must not block on its stdout
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	d := &devRun{cmd: cmd, lines: lines}
	pidRe := regexp.MustCompile(`node\d+\s+pid (\d+)`)
	deadline := time.After(30 * time.Second)
	for d.addr == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("dev exited before it was ready")
			}
			if m := pidRe.FindStringSubmatch(l); m != nil {
				pid, _ := strconv.Atoi(m[1])
				d.pids = append(d.pids, pid)
			}
			if v, ok := strings.CutPrefix(l, "LOCKCLUSTER_ADDR="); ok {
				d.addr = v
			}
			if v, ok := strings.CutPrefix(l, "lockcluster dev: 3 nodes, data in "); ok {
				d.dataDir, _, _ = strings.Cut(v, " ")
			}
		case <-deadline:
			t.Fatal("dev printed no LOCKCLUSTER_ADDR within 30s")
		}
	}
	if len(d.pids) != 3 || d.dataDir == "" || strings.Count(d.addr, ",") != 2 {
		t.Fatalf("pids %v, data dir %q, addr %q", d.pids, d.dataDir, d.addr)
	}
	return d
}

// interrupt sends dev SIGINT and waits for it to exit, returning what it
// printed since the start.
func (d *devRun) interrupt(t *testing.T) string {
	t.Helper()
	d.cmd.Process.Signal(syscall.SIGINT)
	var out strings.Builder
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-d.lines:
			if !ok {
				if err := d.cmd.Wait(); err != nil {
					t.Fatalf("dev exited with %v after SIGINT:\n%s", err, out.String())
				}
				return out.String()
			}
			out.WriteString(l + "\n")
		case <-deadline:
			t.Fatalf("dev did not stop within 30s of SIGINT:\n%s", out.String())
		}
	}
}

// 'lockcluster dev' starts three processes, prints their addresses and
// LOCKCLUSTER_ADDR, serves locks, survives the loss of a node, and on
// SIGINT stops every node and removes its temporary data.
func TestDevCluster(t *testing.T) {
	base := freeBase(t)
	d := startDev(t, base)
	addr, dataDir, pids := d.addr, d.dataDir, d.pids
	if !strings.HasPrefix(addr, "127.0.0.1:"+strconv.Itoa(base)+",") {
		t.Fatalf("node 0 is not on the base port: %s", addr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := lockcluster.Dial(ctx, strings.Split(addr, ","))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Request(ctx, "dev", lockcluster.Options{}, func(context.Context, *lockcluster.Lock) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// Kill one node: the cluster goes on.
	syscall.Kill(pids[1], syscall.SIGKILL)
	if err := c.Request(ctx, "dev", lockcluster.Options{}, func(context.Context, *lockcluster.Lock) error { return nil }); err != nil {
		t.Fatalf("after a node was killed: %v", err)
	}

	c.Close(ctx)
	// The two nodes left never diverged (hashcheck_test.go); node 1 is dead.
	checkAppliedHashes(t, []string{"127.0.0.1:" + strconv.Itoa(base+2), "127.0.0.1:" + strconv.Itoa(base+22)})

	d.interrupt(t)
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("node pid %d still runs after dev stopped", pid)
		}
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("temporary data dir %s still exists: %v", dataDir, err)
	}
}

// The restart command dev prints for a node that exited names the copy of
// the binary in dev's data directory, not the build directory of 'go run',
// which goes away. A node restarted by hand with it keeps Ctrl-C from
// removing the data directory under it, and dev says where it is.
func TestDevRestartByHand(t *testing.T) {
	base := freeBase(t)
	d := startDev(t, base)
	syscall.Kill(d.pids[1], syscall.SIGKILL)
	var restart string
	deadline := time.After(30 * time.Second)
	for restart == "" {
		select {
		case l, ok := <-d.lines:
			if !ok {
				t.Fatal("dev exited")
			}
			if strings.HasSuffix(l, "Restart it with:") {
				restart = strings.TrimSpace(<-d.lines)
			}
		case <-deadline:
			t.Fatal("dev printed no restart command within 30s of a node's death")
		}
	}
	argv := strings.Fields(restart)
	if want := filepath.Join(d.dataDir, "bin", "lockcluster"); argv[0] != want {
		t.Fatalf("restart command %q: want the binary %s", restart, want)
	}
	if fi, err := os.Stat(argv[0]); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("%s: %v, %v", argv[0], fi, err)
	}

	logf, err := os.Create(filepath.Join(t.TempDir(), "node1.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	hand := exec.Command(argv[0], argv[1:]...)
	hand.Stdout, hand.Stderr = logf, logf
	if err := hand.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hand.Process.Kill()
		hand.Wait()
	})
	http := "127.0.0.1:" + strconv.Itoa(base+12)
	testutil.Eventually(t, 30*time.Second, "node1, restarted by hand, ready", func() bool {
		code, _ := readyzOf(http)
		return code == 200
	})

	out := d.interrupt(t)
	if !strings.Contains(out, "kept "+d.dataDir) || !strings.Contains(out, strconv.Itoa(hand.Process.Pid)) {
		t.Fatalf("dev did not say it kept %s for pid %d:\n%s", d.dataDir, hand.Process.Pid, out)
	}
	if _, err := os.Stat(filepath.Join(d.dataDir, "node1", "raft")); err != nil {
		t.Fatalf("dev removed the data of a node that still runs: %v", err)
	}
	if code, _ := readyzOf(http); code == 0 {
		t.Fatal("the node restarted by hand stopped with dev")
	}
}

// 'lockcluster dev --groups 4', as the README runs it: the cluster serves
// a namespace of each group (through the CLI's lock), and 'lockcluster
// status' lists every node's replica of the four groups, 1,024 slots each.
func TestDevGroups(t *testing.T) {
	d := startDev(t, freeBase(t), "--groups", "4")
	for _, ns := range []string{"a", "d", "h", "x"} { // groups 0, 1, 2, 3 (node.SpreadGroup)
		out, err := exec.Command(binary(t), "--addr", d.addr, "-n", ns, "lock", "job", "--", "echo", "ran in "+ns).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "ran in "+ns) {
			t.Fatalf("lock in namespace %s: %v\n%s", ns, err, out)
		}
	}
	out, err := exec.Command(binary(t), "--addr", d.addr, "status").CombinedOutput()
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "  1024  "); !strings.Contains(string(out), "GROUP") || n != 12 {
		t.Fatalf("status: want a GROUP table of 3 nodes x 4 groups of 1024 slots, got %d rows:\n%s", n, out)
	}
	// The README's move: namespace a's slot from group 0 to group 3, while
	// a lock of a is held by a running 'lock' (it holds it throughout).
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(binary(t), append([]string{"--addr", d.addr}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("lockcluster %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := run("placement", "a"); !strings.Contains(out, "group 0 of 4") {
		t.Fatalf("placement a: want group 0 of 4:\n%s", out)
	}
	guard := exec.Command(binary(t), "--addr", d.addr, "-n", "a", "lock", "held", "--", "sleep", "3")
	var guardOut testutil.Buffer
	guard.Stdout, guard.Stderr = &guardOut, &guardOut
	if err := guard.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the guard holds its lock", func() bool {
		out, err := exec.Command(binary(t), "--addr", d.addr, "-n", "a", "query").CombinedOutput()
		return err == nil && strings.Contains(string(out), "held")
	})
	if out := run("slots", "move", "--namespace-of", "a", "--to", "3"); !strings.Contains(out, "moved 1 slot(s) from group 0 to group 3") {
		t.Fatalf("slots move: %s", out)
	}
	if err := guard.Wait(); err != nil {
		t.Fatalf("the lock held across the move was not kept (the guarded command ended early or failed): %v\n%s", err, guardOut.String())
	}
	if out := run("placement", "a"); !strings.Contains(out, "group 3 of 4") || strings.Contains(out, "moving") {
		t.Fatalf("placement a after the move: want group 3 of 4, settled:\n%s", out)
	}
	// The README's commands, as it shows them.
	if out := run("placement", "orders"); !strings.Contains(out, `namespace "orders" (slot 138): group 0 of 4, epoch 0, leader node`) {
		t.Fatalf("placement orders: %s", out)
	}
	if out := run("slots", "move", "--namespace-of", "orders", "--to", "2"); !strings.Contains(out, "moved 1 slot(s) from group 0 to group 2 (epoch 1)") {
		t.Fatalf("slots move --namespace-of orders: %s", out)
	}
	if out := run("slots", "move", "0-63", "--to", "1"); !strings.Contains(out, "moved 64 slot(s) from group 0 to group 1 (epoch 1)") {
		t.Fatalf("slots move 0-63: %s", out)
	}
	if out := run("-n", "a", "lock", "job", "--", "echo", "ran in a again"); !strings.Contains(out, "ran in a again") {
		t.Fatalf("lock in a after the move: %s", out)
	}
	bad, err := exec.Command(binary(t), "--addr", d.addr, "slots", "move", "4096", "--to", "1").CombinedOutput()
	if err == nil || !strings.Contains(string(bad), `"4096" is not a slot`) {
		t.Fatalf("slots move 4096: want a usage error naming it, got %v:\n%s", err, bad)
	}
	bad, err = exec.Command(binary(t), "--addr", d.addr, "slots", "move", "--namespace-of", "a", "--to", "9").CombinedOutput()
	if err == nil || !strings.Contains(string(bad), "group 9 does not exist") {
		t.Fatalf("slots move --to 9: want an error naming group 9, got %v:\n%s", err, bad)
	}
	d.interrupt(t)
}

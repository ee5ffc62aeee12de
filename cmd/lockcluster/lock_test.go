package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/testutil"
)

func lockCmd(pc *procCluster, args ...string) (*exec.Cmd, *testutil.Buffer, *testutil.Buffer) {
	return lockCmdAt(pc.bin, pc.addrs(), args...)
}

// lockCmdAt is 'bin lock args...' with LOCKCLUSTER_ADDR set to addrs.
func lockCmdAt(bin string, addrs []string, args ...string) (*exec.Cmd, *testutil.Buffer, *testutil.Buffer) {
	cmd := exec.Command(bin, append([]string{"lock"}, args...)...)
	cmd.Env = append(os.Environ(), "LOCKCLUSTER_ADDR="+strings.Join(addrs, ","))
	var out, errb testutil.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	return cmd, &out, &errb
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestLockCommand(t *testing.T) {
	pc := startProcs(t, 3)
	c := dialT(t, pc.addrs())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("exports the token and exits with the command's status", func(t *testing.T) {
		cmd, out, errb := lockCmd(pc, "tok", "--", "sh", "-c", `echo "$LOCKCLUSTER_LOCK_NAME $LOCKCLUSTER_LOCK_TOKEN"; exit 7`)
		if code := exitCode(cmd.Run()); code != 7 {
			t.Fatalf("exit %d, want 7; stderr: %s", code, errb)
		}
		f := strings.Fields(out.String())
		if len(f) != 2 || f[0] != "tok" {
			t.Fatalf("child saw %q", out)
		}
		if tok, err := strconv.ParseUint(f[1], 10, 64); err != nil || tok == 0 {
			t.Fatalf("token %q", f[1])
		}
	})

	t.Run("if-available exits 75 when the lock is taken", func(t *testing.T) {
		l, err := c.Acquire(ctx, "busy", lockcluster.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		cmd, out, errb := lockCmd(pc, "busy", "--if-available", "--", "echo", "ran")
		if code := exitCode(cmd.Run()); code != exitNotAvail || out.String() != "" {
			t.Fatalf("exit %d (want %d), stdout %q, stderr %s", code, exitNotAvail, out, errb)
		}
	})

	t.Run("timeout exits 73 and leaves no request behind", func(t *testing.T) {
		l, err := c.Acquire(ctx, "slow", lockcluster.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		cmd, _, errb := lockCmd(pc, "slow", "--timeout", "300ms", "--", "true")
		if code := exitCode(cmd.Run()); code != exitTimeout {
			t.Fatalf("exit %d, want %d; stderr %s", code, exitTimeout, errb)
		}
		q, err := c.Query(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range q.Pending {
			if p.Name == "slow" {
				t.Fatalf("a timed-out request is still queued: %+v", p)
			}
		}
	})

	t.Run("a stolen lock stops the command with SIGTERM and exits 74", func(t *testing.T) {
		cmd, out, errb := lockCmd(pc, "victim", "--grace", "5s", "--",
			"sh", "-c", `trap 'echo got-TERM; exit 0' TERM; echo started; while true; do sleep 0.05; done`)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		testutil.Eventually(t, 10*time.Second, "the command to start", func() bool { return strings.Contains(out.String(), "started") })
		if err := c.Request(ctx, "victim", lockcluster.Options{Steal: true}, func(context.Context, *lockcluster.Lock) error { return nil }); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if code := exitCode(err); code != exitLost {
				t.Fatalf("exit %d, want %d; stderr %s", code, exitLost, errb)
			}
		case <-ctx.Done():
			cmd.Process.Kill()
			t.Fatal("the command was not stopped after its lock was stolen, before the test's deadline")
		}
		if !strings.Contains(out.String(), "got-TERM") || !strings.Contains(errb.String(), "stolen") {
			t.Fatalf("stdout %q, stderr %q", out, errb)
		}
	})

	t.Run("usage errors exit 2", func(t *testing.T) {
		cmd, _, errb := lockCmd(pc, "x")
		if code := exitCode(cmd.Run()); code != exitUsage {
			t.Fatalf("exit %d, stderr %s", code, errb)
		}
		cmd, _, errb = lockCmd(pc, "x", "--mode", "sharde", "--", "true")
		if code := exitCode(cmd.Run()); code != exitUsage || !strings.Contains(errb.String(), "sharde") {
			t.Fatalf("exit %d, stderr %s", code, errb)
		}
	})
}

package main

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

func TestElectAndObserve(t *testing.T) {
	pc := startProcs(t, 3)
	c := dialT(t, pc.addrs())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cli := func(args ...string) (*exec.Cmd, *testutil.Buffer, *testutil.Buffer) {
		cmd, out, errb := lockCmd(pc, args...)
		cmd.Args = append([]string{pc.bin}, args...) // not 'lock'
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd, out, errb
	}
	obs, obsOut, obsErr := cli("observe", "sched", "--interval", "50ms")
	alpha, alphaOut, _ := cli("elect", "sched", "--value", "alpha", "--", "sh", "-c", `echo "leading $LOCKCLUSTER_LOCK_TOKEN"; sleep 60`)
	testutil.Eventually(t, 15*time.Second, "alpha to lead", func() bool { return strings.Contains(alphaOut.String(), "leading") })
	testutil.Eventually(t, 15*time.Second, "observe to print alpha", func() bool { return strings.Contains(obsOut.String(), "alpha\n") })

	// The value shows in query.
	q, err := c.Query(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Held) != 1 || q.Held[0].Name != "sched" || q.Held[0].Label != "alpha" {
		t.Fatalf("query: %+v", q)
	}

	// beta, without a command, waits its turn, then leads when alpha stops.
	_, betaOut, _ := cli("elect", "sched", "--value", "beta")
	testutil.Eventually(t, 15*time.Second, "beta to queue", func() bool {
		q, err := c.Query(ctx)
		return err == nil && len(q.Pending) == 1 && q.Pending[0].Label == "beta"
	})
	if strings.Contains(betaOut.String(), "beta") {
		t.Fatalf("beta leads while alpha does: %s", betaOut)
	}
	alpha.Process.Signal(syscall.SIGTERM) // to the group: sh exits, alpha resigns
	testutil.Eventually(t, 15*time.Second, "beta to lead", func() bool { return strings.Contains(betaOut.String(), "beta\n") })
	testutil.Eventually(t, 15*time.Second, "observe to print beta", func() bool { return strings.Contains(obsOut.String(), "beta\n") })
	if got := obsOut.String(); got != "alpha\nbeta\n" {
		t.Fatalf("observe printed %q; stderr %s", got, obsErr)
	}
	obs.Process.Signal(syscall.SIGINT)
	if err := obs.Wait(); err != nil {
		t.Fatalf("observe after SIGINT: %v; stderr %s", err, obsErr)
	}

	if out, code := run(t, pc, "elect", "sched"); code != exitUsage {
		t.Fatalf("elect without --value: exit %d: %s", code, out)
	}
}

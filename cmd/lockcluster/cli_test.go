package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/testutil"
)

func run(t *testing.T, pc *procCluster, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(pc.bin, args...)
	cmd.Env = append(os.Environ(), "LOCKCLUSTER_ADDR="+strings.Join(pc.addrs(), ","))
	out, err := cmd.CombinedOutput()
	return string(out), exitCode(err)
}

func TestClusterCommands(t *testing.T) {
	pc := startProcs(t, 3)
	c := dialT(t, pc.addrs(), lockcluster.WithLabel("holder"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "q", lockcluster.Options{Mode: lockcluster.Shared})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)

	t.Run("query -o json is the spec's LockManagerSnapshot", func(t *testing.T) {
		out, code := run(t, pc, "query", "-o", "json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, out)
		}
		var snap struct {
			Held []struct {
				Name, Mode, ClientID, Label string
				Token                       uint64
			} `json:"held"`
			Pending []json.RawMessage `json:"pending"`
		}
		if err := json.Unmarshal([]byte(out), &snap); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if len(snap.Held) != 1 || snap.Held[0].Name != "q" || snap.Held[0].Mode != "shared" || snap.Held[0].Label != "holder" ||
			len(snap.Held[0].ClientID) != 36 || snap.Held[0].Token != l.Token() || snap.Pending == nil {
			t.Fatalf("query: %s", out)
		}
	})

	t.Run("members, status and health", func(t *testing.T) {
		out, code := run(t, pc, "members", "-o", "json")
		var ms []lockcluster.Member
		if code != 0 || json.Unmarshal([]byte(out), &ms) != nil || len(ms) != 3 {
			t.Fatalf("members: exit %d: %s", code, out)
		}
		leaders := 0
		for _, m := range ms {
			if m.Leader {
				leaders++
			}
		}
		if leaders != 1 {
			t.Fatalf("members show %d leaders: %s", leaders, out)
		}
		if out, code := run(t, pc, "status"); code != 0 || strings.Count(out, "Leader") < 1 {
			t.Fatalf("status: exit %d: %s", code, out)
		}
		// An endpoint that does not answer makes status fail, after the table.
		if out, code := run(t, pc, "status", "--addr", strings.Join(pc.addrs(), ",")+",127.0.0.1:1"); code != 1 || !strings.Contains(out, "1 of 4 endpoints did not answer") || !strings.Contains(out, "Leader") {
			t.Fatalf("status with a dead endpoint: exit %d: %s", code, out)
		}
		// Health is a probe: a node reports SERVING once it sees a leader.
		testutil.Eventually(t, 5*time.Second, "health to pass", func() bool {
			_, code := run(t, pc, "health")
			return code == 0
		})
		if out, code := run(t, pc, "health", "--addr", "127.0.0.1:1"); code == 0 {
			t.Fatalf("health of a closed port: exit 0: %s", out)
		}
		if out, code := run(t, pc, "query", "-o", "yaml"); code != exitUsage || !strings.Contains(out, "yaml") {
			t.Fatalf("bad -o: exit %d: %s", code, out)
		}
	})

	t.Run("leave removes a dead member", func(t *testing.T) {
		// Every member first records its API address and is probed, so
		// that what members says of the killed one comes from its API's
		// probe (the subtests above can take under a second; a member
		// killed before it recorded itself is judged by raft's heartbeats
		// instead: internal/node's TestMemberWithoutAPIAddressShowsUnreachable).
		testutil.Eventually(t, 30*time.Second, "every member probed ok", func() bool {
			out, _ := run(t, pc, "members")
			probed := 0
			for _, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(line, "node") && strings.Contains(line, " ok") {
					probed++
				}
			}
			return probed == 3
		})
		victim := (pc.leader(5*time.Second) + 1) % 3
		pc.kill(victim)
		// Before it leaves, the dead member shows as such: members says
		// unreachable, and status fails naming it, although every endpoint
		// that answers is healthy.
		id := pc.Nodes[victim].ID
		testutil.Eventually(t, 30*time.Second, "members to show the killed node unreachable", func() bool {
			out, _ := run(t, pc, "members")
			for _, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(line, id+" ") && strings.Contains(line, "unreachable") {
					return true
				}
			}
			return false
		})
		var alive []string
		for i, n := range pc.Nodes {
			if i != victim {
				alive = append(alive, n.GRPC)
			}
		}
		if out, code := run(t, pc, "status", "--addr", strings.Join(alive, ",")); code != 1 || !strings.Contains(out, id+" unreachable") {
			t.Fatalf("status with a dead member among the answering endpoints' cluster: exit %d: %s", code, out)
		}
		out, code := run(t, pc, "leave", pc.Nodes[victim].ID)
		if code != 0 {
			t.Fatalf("leave: exit %d: %s", code, out)
		}
		out, _ = run(t, pc, "members", "-o", "json")
		var ms []lockcluster.Member
		json.Unmarshal([]byte(out), &ms)
		if len(ms) != 2 {
			t.Fatalf("after leave: %s", out)
		}
		// Leaving again, or a typo, is an error naming the members.
		if out, code := run(t, pc, "leave", pc.Nodes[victim].ID); code == 0 || !strings.Contains(out, "not in the cluster") {
			t.Fatalf("leave of a non-member: exit %d: %s", code, out)
		}
	})
}

// A live node removed by leave says so and exits, instead of campaigning
// and logging forever (raft stops replicating to it at once, so it often
// never applies its own removal).
func TestRemovedNodeStops(t *testing.T) {
	pc := startProcs(t, 3)
	victim := (pc.leader(15*time.Second) + 1) % 3
	// The removed node asks the members its directory knows whether it
	// is still one.
	pc.directoryComplete(15 * time.Second)
	if out, code := run(t, pc, "leave", pc.Nodes[victim].ID); code != 0 {
		t.Fatalf("leave: exit %d: %s", code, out)
	}
	select {
	case <-pc.Done(victim):
	case <-time.After(60 * time.Second): // only stops a hung test
		t.Fatalf("the removed node %s still runs", pc.Nodes[victim].ID)
	}
	if st := pc.ProcessState(victim); st == nil || st.ExitCode() != exitRemoved {
		t.Fatalf("the removed node exited with %v, want %d", st, exitRemoved)
	}
	log, _ := os.ReadFile(pc.Nodes[victim].Log)
	if !strings.Contains(string(log), "removed from the cluster") {
		t.Fatalf("the removed node's log does not say why it stopped:\n%s", log)
	}
	pc.leader(15 * time.Second) // the other two carry on
}

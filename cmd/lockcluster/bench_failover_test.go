package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster/internal/loadgen"
)

// The failover workload with sessions (issue 21's scenario, small): 200
// sessions speaking the protocol directly each hold a lock, the leader is
// killed once, and the run follows the cluster until a leader is stable
// and every session has a heartbeat acknowledged again, restarts the
// node and ends by itself. It checks that the run completes and counts
// what it should, not how fast the failover was.
func TestBenchFailoverSessions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and kills its leader")
	}
	// The deadline only stops a run that hangs: each wait of the run is
	// bounded by itself (--trial-max, a minute for catching up).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, binary(t), "bench", "--local", "--workload", "failover", "--sessions", "200", "--trials", "1",
		"--ttl", "3s", "--stable-for", "1s", "--trial-max", "1m", "--trial-gap", "100ms", "--conns-per-node", "2", "-o", "json")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v (deadline: %v)\nstderr:\n%s", err, ctx.Err(), stderr.String())
	}
	var r loadgen.Result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	f := r.Failover
	if r.Workload != "failover" || r.Sessions != 200 || f == nil || f.Sessions == nil || len(f.Trials) != 1 || f.Trials[0].Sessions == nil {
		t.Fatalf("result: %+v\nfailover: %+v", r, f)
	}
	fs, tr := f.Sessions, f.Trials[0]
	if fs.Sessions != 200 || fs.ReattachMS != [2]float64{50, 250} || fs.TTLMS != 3000 {
		t.Errorf("sessions %d, reattach window %v ms, TTL %g ms", fs.Sessions, fs.ReattachMS, fs.TTLMS)
	}
	// The kill was followed to the end: a leader, a grant of a fresh
	// request, a stable leader, every session acknowledged again, and the
	// node started again.
	st := tr.Sessions
	if tr.Killed == "" || tr.ElectedMS <= 0 || tr.FirstGrantMS <= 0 || tr.FirstGrantMS >= 60_000 {
		t.Errorf("trial: %+v", tr)
	}
	if !st.Stable || st.Leader == "" || st.Leader == tr.Killed || st.Terms < 1 || st.RecoveredMS <= 0 || st.RestartedMS <= 0 {
		t.Errorf("the trial did not end stable, every session acknowledged and the node restarted: %+v", st)
	}
	// The sessions on the killed node came back: reattaches were counted.
	if fs.Reattaches == 0 || fs.AttachTries < fs.Reattaches || st.Reattaches == 0 || st.PeakReattachesSec == 0 {
		t.Errorf("reattaches %d (tries %d), in the trial %d (peak %d/s)", fs.Reattaches, fs.AttachTries, st.Reattaches, st.PeakReattachesSec)
	}
	// A failover loses no session and no lock.
	if fs.Expired != 0 || fs.LocksLost != 0 || fs.LocksHeld != 200 || f.SessionsLost != 0 {
		t.Errorf("expired %d, locks lost %d, locks held at the end %d of 200", fs.Expired, fs.LocksLost, fs.LocksHeld)
	}
	if !strings.HasPrefix(r.AppliedHashes, "equal at index ") {
		t.Errorf("applied hashes: %q", r.AppliedHashes)
	}
	if !strings.Contains(stderr.String(), "trial 1/1: killed") {
		t.Errorf("no trial line on stderr:\n%s", stderr.String())
	}
}

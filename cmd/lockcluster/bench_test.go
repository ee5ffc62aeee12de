package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster/internal/loadgen"
)

// 'lockcluster bench --local' starts its own 3-node cluster, runs, stops
// it, and writes a sane JSON result.
func TestBenchLocalWritesJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	var stdout, stderr bytes.Buffer
	// The deadline only stops a run that hangs: the run stops by itself
	// after its window, which DurationS below checks.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), "bench", "--local", "--workload", "contended", "--workers", "4", "--duration", "2s",
		"--warmup", "200ms", "--baseline", "20", "-o", "json")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v (deadline: %v)\nstderr:\n%s", err, ctx.Err(), stderr.String())
	}
	var r loadgen.Result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	if r.Driver != "lockcluster" || r.Workload != "contended" || r.Workers != 4 || r.DurationS < 1.9 || r.DurationS > 3 {
		t.Errorf("header: %+v", r)
	}
	if r.Pairs == 0 || r.PairsPerSec <= 0 || r.Errors != 0 || r.SessionsLost != 0 {
		t.Errorf("pairs %d (%.1f/s), errors %d %v, sessions lost %d", r.Pairs, r.PairsPerSec, r.Errors, r.ErrorSamples, r.SessionsLost)
	}
	if r.Handoffs == 0 || r.Handoff.P50MS <= 0 || r.CommitP50MS <= 0 {
		t.Errorf("hand-offs %d, hand-off %+v, commit p50 %v", r.Handoffs, r.Handoff, r.CommitP50MS)
	}
	a := r.Acquire
	if a.Count < r.Pairs || !(0 < a.P50MS && a.P50MS <= a.P90MS && a.P90MS <= a.P99MS && a.P99MS <= a.P999MS && a.P999MS <= a.MaxMS) {
		t.Errorf("acquire latency %+v", a)
	}
	if len(r.Processes) != 4 || len(r.LoadAvg) != 2 {
		t.Errorf("processes %+v, load %v", r.Processes, r.LoadAvg)
	}
	// The replicas are compared at the end, by their applied hashes.
	if !strings.HasPrefix(r.AppliedHashes, "equal at index ") || strings.Count(r.AppliedHashes, "node") != 3 {
		t.Errorf("applied hashes: %q, want equal on the three nodes", r.AppliedHashes)
	}
	if !bytes.Contains(stderr.Bytes(), []byte("measuring")) {
		t.Errorf("no progress on stderr:\n%s", stderr.String())
	}
}

// The held workload keeps its locks for --hold before it measures each
// node's memory, split into anonymous and file-backed; --cpuprofile writes
// the load generator's profile. The idle workload heartbeats without a
// session expiring. The snapshot workload is checked last.
func TestBenchHeldAndIdle(t *testing.T) {
	if testing.Short() {
		t.Skip("starts clusters")
	}
	prof := filepath.Join(t.TempDir(), "bench.pprof")
	run := func(args ...string) (loadgen.Result, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(binary(t), append([]string{"bench", "--local", "-o", "json"}, args...)...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v\nstderr:\n%s", err, stderr.String())
		}
		var r loadgen.Result
		if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
			t.Fatalf("%v\n%s", err, stdout.String())
		}
		return r, stderr.String()
	}
	r, stderr := run("--workload", "held", "--locks", "300", "--sessions", "3", "--workers", "8", "--hold", "300ms", "--cpuprofile", prof)
	if h := r.Held; h == nil || h.Locks != 300 || len(h.WhileHeld) != 4 {
		t.Fatalf("held result %+v", r.Held)
	}
	for _, p := range r.Held.WhileHeld {
		if p.AnonMiB <= 0 || p.FileMiB <= 0 || p.AnonMiB+p.FileMiB > p.RSSMiB+1 {
			t.Errorf("memory of %s: %+v", p.Name, p)
		}
	}
	if !strings.Contains(stderr, "keeping them 300ms") {
		t.Errorf("no hold announced:\n%s", stderr)
	}
	if st, err := os.Stat(prof); err != nil || st.Size() == 0 {
		t.Errorf("--cpuprofile: %v", err)
	}
	r, _ = run("--workload", "idle", "--sessions", "60", "--duration", "3s", "--ttl", "4s")
	if i := r.Idle; i == nil || i.Sessions != 60 || i.Acks == 0 || i.Expired != 0 {
		t.Fatalf("idle result %+v", r.Idle)
	}
	// The snapshot workload holds its locks, saves snapshots of them through
	// the leader while pairs run, and sorts every pair into during or
	// outside.
	r, _ = run("--workload", "snapshot", "--locks", "300", "--sessions", "3", "--workers", "2", "--duration", "3s", "--snapshot-every", "500ms")
	sn := r.Snapshot
	if sn == nil || sn.Held == nil || sn.Held.Locks != 300 || len(sn.Snapshots) == 0 || sn.Bytes == 0 || sn.DuringPairs+sn.OutsidePairs == 0 {
		t.Fatalf("snapshot result %+v", r.Snapshot)
	}
	for _, sp := range sn.Snapshots {
		if sp.End < sp.Start {
			t.Fatalf("a snapshot ended before it started: %+v", sp)
		}
	}
}

// The watch workload: 20 watches of the namespace, over 4 connections
// spread over the three nodes, follow 4 workers' uncontended pairs for
// 2 s, and every watcher receives every change the workers caused (a
// grant and a release a pair), none cut. Counts only: no timing is
// asserted.
func TestBenchWatch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), "bench", "--local", "--workload", "watch", "--workers", "4", "--watchers", "20",
		"--watch-conns", "4", "--duration", "2s", "--warmup", "200ms", "-o", "json")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v (deadline: %v)\nstdout:\n%s\nstderr:\n%s", err, ctx.Err(), stdout.String(), stderr.String())
	}
	var r loadgen.Result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	w := r.Watch
	if r.Workload != "watch" || w == nil || r.Pairs == 0 || r.Errors != 0 || r.SessionsLost != 0 {
		t.Fatalf("pairs %d, errors %d %v, sessions lost %d, watch %+v", r.Pairs, r.Errors, r.ErrorSamples, r.SessionsLost, w)
	}
	if w.Watchers != 20 || w.Conns != 4 || w.Caused < 2*r.Pairs {
		t.Errorf("%d watchers over %d connections, %d changes caused for %d pairs in the window", w.Watchers, w.Conns, w.Caused, r.Pairs)
	}
	if w.ReceivedMin != w.Caused || w.ReceivedMax != w.Caused || w.Complete != 20 || w.Cut != 0 || w.Failed != 0 || !w.Valid {
		t.Errorf("caused %d, received min %d max %d, %d complete, %d cut, %d failed %v, valid %v",
			w.Caused, w.ReceivedMin, w.ReceivedMax, w.Complete, w.Cut, w.Failed, w.ErrorSamples, w.Valid)
	}
	// Client k starts on node k mod 3: the followers serve watches too.
	on, leaders := 0, 0
	for _, e := range w.PerEndpoint {
		on += e.Watches
		if e.Leader {
			leaders++
		}
		if e.Watches == 0 {
			t.Errorf("no watch on %+v", e)
		}
	}
	if len(w.PerEndpoint) != 3 || on != 20 || leaders != 1 {
		t.Errorf("per endpoint %+v", w.PerEndpoint)
	}
	if w.Events == 0 || w.Lag.Count == 0 || w.WatcherEventsPerSecMin <= 0 || len(r.Processes) != 4 {
		t.Errorf("events %d, lag %+v, per watcher min %.1f/s, processes %+v", w.Events, w.Lag, w.WatcherEventsPerSecMin, r.Processes)
	}
}

// 'bench --workload move' (issue 27): a namespace's slot moves between
// two groups while it holds locks and queues requests, and probes in it
// and in a control namespace take locks throughout: every move is
// measured, and none loses a lock, a session or a call.
func TestBenchMove(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, binary(t), "bench", "--local", "--groups", "2", "--workload", "move", "--locks", "200", "--pending", "100",
		"--moves", "3", "--move-every", "200ms", "--workers", "4", "-o", "json")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v (deadline: %v)\nstderr:\n%s", err, ctx.Err(), stderr.String())
	}
	var r loadgen.Result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	m := r.Move
	if m == nil || m.Moves != 3 || m.Held != 200 || m.Pending != 100 {
		t.Fatalf("move result %+v", m)
	}
	if m.Errors != 0 || m.LocksLost != 0 || m.SessionsLost != 0 {
		t.Errorf("errors %d %v, locks lost %d, sessions lost %d", m.Errors, m.ErrorSamples, m.LocksLost, m.SessionsLost)
	}
	if m.Took.Count != 3 || m.Took.P50MS <= 0 || m.Stall.Count != 3 || m.ControlStall.Count != 3 || m.Calls.Count == 0 || m.ControlCalls.Count == 0 {
		t.Errorf("took %+v, stall %+v, control %+v, calls %d/%d", m.Took, m.Stall, m.ControlStall, m.Calls.Count, m.ControlCalls.Count)
	}
	if !strings.HasPrefix(r.AppliedHashes, "equal at index ") {
		t.Errorf("applied hashes: %q", r.AppliedHashes)
	}
	bad, err := exec.CommandContext(ctx, binary(t), "bench", "--local", "--workload", "move").CombinedOutput()
	if err == nil || !strings.Contains(string(bad), "--groups 2 or more") {
		t.Errorf("move on one group: want a usage error, got %v:\n%s", err, bad)
	}
}

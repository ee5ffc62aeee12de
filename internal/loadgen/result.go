package loadgen

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// Result is what a run measured. Rates are per second of the measured
// window; latencies in milliseconds.
type Result struct {
	Driver    string  `json:"driver"`
	Workload  string  `json:"workload"`
	Workers   int     `json:"workers"`
	Sessions  int     `json:"sessions"`
	HoldMS    float64 `json:"hold_ms"`
	DurationS float64 `json:"duration_s"`

	Pairs          int64    `json:"pairs"` // acquire+release pairs completed
	PairsPerSec    float64  `json:"pairs_per_sec"`
	Handoffs       int64    `json:"handoffs,omitempty"`
	HandoffsPerSec float64  `json:"handoffs_per_sec,omitempty"`
	Attempts       int64    `json:"attempts,omitempty"` // ifavailable: requests made
	NotAvailable   int64    `json:"not_available,omitempty"`
	Reads          int64    `json:"reads,omitempty"`
	Writes         int64    `json:"writes,omitempty"`
	SessionsOpened int64    `json:"sessions_opened,omitempty"` // churn
	Errors         int64    `json:"errors"`
	ErrorSamples   []string `json:"error_samples,omitempty"`
	// SessionsLost counts sessions the service ended during the run.
	SessionsLost int64 `json:"sessions_lost"`

	Acquire Latency  `json:"acquire"`
	Release Latency  `json:"release"`
	Handoff Latency  `json:"handoff"`
	Open    *Latency `json:"open,omitempty"` // churn: opening a session
	// CommitP50MS is the baseline: one worker's acquire p50 on a free name
	// (one RPC and one raft commit), measured just before the run.
	CommitP50MS float64 `json:"commit_p50_ms,omitempty"`

	Idle     *IdleResult     `json:"idle,omitempty"`
	Failover *FailoverResult `json:"failover,omitempty"`
	Held     *HeldResult     `json:"held,omitempty"`
	Flood    *FloodResult    `json:"flood,omitempty"`
	Snapshot *SnapLatResult  `json:"snapshot,omitempty"`
	Watch    *WatchResult    `json:"watch,omitempty"`
	Move     *MoveResult     `json:"move,omitempty"`

	// RaftTimers are the leader's raft timers (p50, p99 in ms) at the end
	// of the run, when its /metrics has them (see RaftTimers).
	RaftTimers map[string][2]float64 `json:"raft_timers_ms,omitempty"`
	// AppliedHashes, with --local, is how the nodes' running hashes of the
	// entries they applied compared at the end: "equal at index N", or
	// what differed. A benchmark is a long run of writes: it checks the
	// replicas too.
	AppliedHashes string `json:"applied_hashes,omitempty"`

	// Filled by the caller when it knows them.
	Processes []ProcUsage `json:"processes,omitempty"`
	LoadAvg   []float64   `json:"loadavg_1m,omitempty"` // before and after
	Command   string      `json:"command,omitempty"`
}

func rate(n int64, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return math.Round(float64(n)/seconds*10) / 10
}

// WriteTable prints r for people.
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s %s: %d workers, %d sessions, hold %gms, %.1fs measured\n", r.Driver, r.Workload, r.Workers, r.Sessions, r.HoldMS, r.DurationS)
	if r.Pairs > 0 || r.Workload != Idle && r.Workload != HeldLocks && r.Workload != Failover && r.Workload != Flood && r.Workload != Snapshots && r.Workload != Move {
		fmt.Fprintf(tw, "pairs\t%d\t%.1f/s\n", r.Pairs, r.PairsPerSec)
	}
	if r.Handoffs > 0 {
		fmt.Fprintf(tw, "hand-offs\t%d\t%.1f/s\n", r.Handoffs, r.HandoffsPerSec)
	}
	if r.Attempts > 0 {
		fmt.Fprintf(tw, "attempts\t%d\t%.1f/s\t(not available %d)\n", r.Attempts, rate(r.Attempts, r.DurationS), r.NotAvailable)
	}
	if r.Reads+r.Writes > 0 {
		fmt.Fprintf(tw, "reads / writes\t%d / %d\n", r.Reads, r.Writes)
	}
	if r.SessionsOpened > 0 {
		fmt.Fprintf(tw, "sessions opened\t%d\t%.1f/s\n", r.SessionsOpened, rate(r.SessionsOpened, r.DurationS))
	}
	fmt.Fprintf(tw, "errors\t%d\n", r.Errors)
	for _, e := range r.ErrorSamples {
		fmt.Fprintf(tw, "  e.g.\t%s\n", e)
	}
	fmt.Fprintf(tw, "sessions lost\t%d\n", r.SessionsLost)
	if r.Acquire.Count > 0 {
		fmt.Fprintln(tw, "latency (ms)\tcount\tp50\tp90\tp99\tp99.9\tmax")
	}
	row := func(name string, l Latency) {
		if l.Count > 0 {
			fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\n", name, l.Count, l.P50MS, l.P90MS, l.P99MS, l.P999MS, l.MaxMS)
		}
	}
	row("  acquire", r.Acquire)
	row("  release", r.Release)
	row("  hand-off", r.Handoff)
	if r.Open != nil {
		row("  open session", *r.Open)
	}
	if r.CommitP50MS > 0 {
		fmt.Fprintf(tw, "one commit (1 worker acquire p50)\t%.3f ms", r.CommitP50MS)
		if r.Handoff.Count > 0 {
			fmt.Fprintf(tw, "\thand-off p50 / commit p50 = %.2f", r.Handoff.P50MS/r.CommitP50MS)
		}
		fmt.Fprintln(tw)
	}
	if r.Idle != nil {
		r.Idle.write(tw)
	}
	if r.Failover != nil {
		r.Failover.write(tw)
	}
	if r.Held != nil {
		r.Held.write(tw)
	}
	if r.Snapshot != nil {
		r.Snapshot.write(tw)
	}
	if r.Flood != nil {
		r.Flood.write(tw)
	}
	if r.Watch != nil {
		r.Watch.write(tw)
	}
	if r.Move != nil {
		r.Move.write(tw)
	}
	for _, t := range raftTimers {
		if v, ok := r.RaftTimers[t]; ok {
			fmt.Fprintf(tw, "leader %s (ms)\tp50 %.3f\tp99 %.3f\n", t, v[0], v[1])
		}
	}
	if len(r.Processes) > 0 {
		fmt.Fprintln(tw, "process\tpid\tcpu (cores)\tRSS (MiB)")
		for _, p := range r.Processes {
			fmt.Fprintf(tw, "  %s\t%d\t%.2f\t%.0f\n", p.Name, p.PID, p.Cores, p.RSSMiB)
		}
	}
	if r.AppliedHashes != "" {
		fmt.Fprintf(tw, "applied hashes\t%s\n", r.AppliedHashes)
	}
	if len(r.LoadAvg) == 2 {
		fmt.Fprintf(tw, "load average (1 min)\tbefore %.2f\tafter %.2f\n", r.LoadAvg[0], r.LoadAvg[1])
	}
	return tw.Flush()
}

// sample keeps a short, readable error text.
func sample(err error) string {
	s := err.Error()
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/loadgen"
	"github.com/lockcluster/lockcluster/internal/node"
	"github.com/lockcluster/lockcluster/internal/proccluster"
)

// benchFlags are the flags of 'lockcluster bench'.
type benchFlags struct {
	cfg          loadgen.Config
	local        bool
	serverBin    string
	serveArgs    []string
	ttl          time.Duration
	preferLeader bool
	unaryWrites  bool
	connsPerNode int
	keep         bool
	trialGap     time.Duration
	cpuProfile   string
	opens        int
	floodWorkers int
	snapEvery    time.Duration
	moves        int
	moveEvery    time.Duration
	pending      int
	holdWorkers  int
	stableFor    time.Duration
	trialMax     time.Duration
	reattachMin  time.Duration
	reattachMax  time.Duration
	restartAfter time.Duration
	groups       int
	namespaces   int
}

func newBench(g *globals) *cobra.Command {
	f := &benchFlags{cfg: loadgen.Config{Workload: loadgen.Uncontended, Workers: 16, Duration: 10 * time.Second, Warmup: time.Second,
		WriteRatio: 0.2, Baseline: 200}, preferLeader: true}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure a cluster: lock throughput, latency, hand-offs, failover, idle sessions",
		Long: `Measure a cluster (--addr), or a local 3-node cluster it starts itself (--local:
'lockcluster serve' processes on loopback, fsync on, data in a temporary
directory). Workloads:

  uncontended  every worker locks and releases a name of its own
  contended    all workers lock one name: the hand-off rate and latency
  rw           one name, readers (shared) and writers (exclusive, --write-ratio)
  ifavailable  all workers try one name with ifAvailable
  churn        open a session, lock, release, close the session, again
  idle         --sessions sessions that only heartbeat: heartbeat cost, expiries
  failover     kill the leader --trials times under load (--local only); with
               --sessions N, N sessions speaking the protocol directly (as
               idle's do) each hold a lock and heartbeat, and reattach
               --reattach-min..--reattach-max after their stream fails, to any
               node: per kill the times to a leader, a grant and a stable
               leader, the elections and step-downs, reattaches per second,
               CPU, and sessions in jeopardy, expired, locks lost
  held         acquire --locks locks and keep them: each node's memory
  flood        a tenant makes --opens OpenSession calls far over its sessions
               limit (--local sets it to 1000) while --workers lock in another
               namespace: their latency quiet and flooded, and the log entries
               the flood added
  snapshot     hold --locks locks, then run --workers uncontended pairs while
               saving a snapshot every --snapshot-every: the pairs' latency
               during a snapshot and outside one
  watch        --workers uncontended pairs while --watchers watches (default
               1000) of the whole namespace, over --watch-conns connections
               spread over the nodes, follow it: events/s in all and per
               watcher, the lag from the leader's entry time to receipt,
               watches cut (resync: the run is then not valid, exit 1), and
               whether every watcher received every change the workers caused

It reports acquire+release pairs per second and the p50/p90/p99/p99.9 of the
acquire latency and of the hand-off (release started → next holder told), and
with --local each node's CPU and RSS, and whether the nodes' running hashes of
the entries they applied are equal at the end (exit 1 if they differ).
Progress goes to stderr once a second;
-o json writes the result as JSON. Every run stops by itself after --duration
(plus --warmup) or --max-ops pairs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.checkOutput(); err != nil {
				return err
			}
			if err := f.cfg.Validate(); err != nil {
				return &exitError{code: exitUsage, msg: err.Error()}
			}
			if f.groups < 1 || f.groups > node.MaxGroups {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--groups %d: want 1 to %d", f.groups, node.MaxGroups)}
			}
			if f.namespaces < 1 || f.namespaces > 4096 {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--namespaces %d: want 1 to 4096", f.namespaces)}
			}
			if f.cfg.Workload == loadgen.Failover && !f.local {
				return &exitError{code: exitUsage, msg: "the failover workload kills nodes: it needs --local"}
			}
			if f.reattachMin < 0 || f.reattachMax < f.reattachMin {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--reattach-min %s and --reattach-max %s: 0 <= min <= max", f.reattachMin, f.reattachMax)}
			}
			return runBench(g, f, strings.Join(os.Args, " "))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.cfg.Workload, "workload", f.cfg.Workload, "one of "+strings.Join(loadgen.Workloads, ", "))
	fl.IntVar(&f.cfg.Workers, "workers", f.cfg.Workers, "concurrent workers (1…1024)")
	fl.DurationVar(&f.cfg.Duration, "duration", f.cfg.Duration, "the measured window")
	fl.DurationVar(&f.cfg.Warmup, "warmup", f.cfg.Warmup, "run this long before measuring")
	fl.DurationVar(&f.cfg.Hold, "hold", 0, "how long each lock is held; held: how long to keep every lock before measuring")
	fl.IntVar(&f.cfg.Sessions, "sessions", 0, "sessions the workers share (default one per worker); idle: sessions to open (default 1000); held: sessions holding the locks; failover: sessions holding a lock each, speaking the protocol directly (instead of workers)")
	fl.Float64Var(&f.cfg.WriteRatio, "write-ratio", f.cfg.WriteRatio, "rw: the share of exclusive requests")
	fl.Int64Var(&f.cfg.MaxOps, "max-ops", 10_000_000, "stop after this many pairs")
	fl.IntVar(&f.cfg.Baseline, "baseline", f.cfg.Baseline, "contended, rw: first measure one commit with this many single-worker acquires (0: skip)")
	fl.IntVar(&f.cfg.Locks, "locks", 100_000, "held: how many locks to acquire")
	fl.IntVar(&f.cfg.Trials, "trials", 10, "failover: how many times to kill the leader")
	fl.DurationVar(&f.trialGap, "trial-gap", time.Second, "failover: wait this long after the restarted node caught up before the next kill")
	fl.DurationVar(&f.stableFor, "stable-for", 5*time.Second, "failover with --sessions: a leader that keeps its term this long after a kill is stable")
	fl.DurationVar(&f.trialMax, "trial-max", 2*time.Minute, "failover with --sessions: the longest wait for a stable leader and every session acknowledged after a kill")
	fl.DurationVar(&f.restartAfter, "restart-after", 0, "failover with --sessions: start the killed node again this long after the first grant that follows the kill")
	fl.DurationVar(&f.reattachMin, "reattach-min", 50*time.Millisecond, "failover with --sessions: the shortest wait before a session attaches again after its stream failed")
	fl.DurationVar(&f.reattachMax, "reattach-max", 250*time.Millisecond, "failover with --sessions: the longest such wait (uniformly jittered between the two)")
	fl.DurationVar(&f.ttl, "ttl", 0, "session TTL (default: the client's, 10s)")
	fl.BoolVar(&f.local, "local", false, "start a local 3-node cluster of serve processes (fsync on) and measure it")
	fl.StringVar(&f.serverBin, "server-bin", "", "--local: the lockcluster binary the nodes run (default: this one)")
	fl.StringArrayVar(&f.serveArgs, "serve-arg", nil, "--local: an extra flag for every 'serve' (repeatable)")
	fl.BoolVar(&f.unaryWrites, "unary-writes", false, "send requests and releases as unary calls, not on the session stream (to compare)")
	fl.BoolVar(&f.preferLeader, "prefer-leader", true, "put the leader's endpoint first, so that clients talk to it (no forwarding); with --groups and --namespaces, each namespace's group leader")
	fl.IntVar(&f.groups, "groups", 1, "--local: the Raft groups of the cluster (serve --groups); with --namespaces, the groups the names are spread over")
	fl.IntVar(&f.namespaces, "namespaces", 1, "the namespaces the sessions spread over (session i in the i-th, round robin): NAMESPACE-0, -1, ... picked so that each of the --groups serves as many (1: the --namespace alone)")
	fl.BoolVar(&f.keep, "keep", false, "--local: keep the nodes' data directories and logs")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write this process's (the load generator's) CPU profile here; profile the nodes with 'serve --enable-pprof'")
	fl.IntVar(&f.connsPerNode, "conns-per-node", 8, "idle, failover with --sessions: connections per node that carry the session streams (at least one per 100 sessions per node: a node lets one connection carry 256 streams, serve --max-concurrent-streams)")
	fl.IntVar(&f.opens, "opens", 100_000, "flood: OpenSession calls the flooding tenant makes")
	fl.IntVar(&f.floodWorkers, "flood-workers", 64, "flood: concurrent flooding callers")
	fl.DurationVar(&f.snapEvery, "snapshot-every", 5*time.Second, "snapshot: the pause between one snapshot's end and the next one's start")
	fl.IntVar(&f.moves, "moves", 10, "move: how many times the namespace's slot moves (between group 0 and group 1: needs --groups 2 or more)")
	fl.DurationVar(&f.moveEvery, "move-every", time.Second, "move: the pause after each move")
	fl.IntVar(&f.pending, "pending", 5000, "move: requests queued behind the held locks (--locks of them held; default 5000 each)")
	fl.IntVar(&f.holdWorkers, "hold-workers", 256, "snapshot: acquires in flight while --locks are taken")
	fl.IntVar(&f.cfg.Watchers, "watchers", 0, "watch: how many watches of the namespace (default 1000)")
	fl.IntVar(&f.cfg.WatchConns, "watch-conns", 0, "watch: the client connections the watches share, spread over the nodes (default 16; at most 250 watches on one)")
	return cmd
}

func runBench(g *globals, f *benchFlags, command string) error {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if f.cpuProfile != "" {
		out, err := os.Create(f.cpuProfile)
		if err != nil {
			return &exitError{code: exitUsage, msg: fmt.Sprintf("--cpuprofile: %v", err)}
		}
		defer out.Close()
		if err := pprof.StartCPUProfile(out); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if f.cfg.Workload == loadgen.Move && f.local && f.groups < 2 {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("--workload move --groups %d: a slot moves between groups: want --groups 2 or more", f.groups)}
	}
	addrs := g.endpoints()
	var cluster *proccluster.Cluster
	if f.local {
		bin := f.serverBin
		if bin == "" {
			var err error
			if bin, err = os.Executable(); err != nil {
				return err
			}
		}
		fmt.Fprintln(os.Stderr, "starting a local 3-node cluster...")
		args := f.serveArgs
		if f.groups > 1 {
			args = append(args, fmt.Sprintf("--groups=%d", f.groups))
		}
		if f.cfg.Workload == loadgen.Flood && !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--limit-sessions-per-namespace") }) {
			args = append(args, "--limit-sessions-per-namespace=1000")
		}
		args = uncapConns(bin, args)
		var err error
		if cluster, err = loadgen.StartLocal(ctx, bin, 3, args); err != nil {
			return err
		}
		cluster.Keep = f.keep
		defer cluster.Stop()
		addrs = cluster.Addrs()
		fmt.Fprintf(os.Stderr, "cluster up: %s (data and logs in %s)\n", strings.Join(addrs, ","), cluster.Dir)
	}
	if f.preferLeader {
		addrs = loadgen.LeaderFirst(ctx, addrs)
	}
	cfg := f.cfg
	cfg.Progress = os.Stderr
	d := &loadgen.Lockcluster{Endpoints: addrs, Namespace: g.namespace, TTL: f.ttl, UnaryWrites: f.unaryWrites}
	if f.namespaces > 1 {
		d.Namespaces = spreadNamespaces(g.namespace, f.namespaces, f.groups)
		fmt.Fprintf(os.Stderr, "namespaces: %s\n", strings.Join(d.Namespaces, " "))
		if f.preferLeader && f.groups > 1 {
			// Each namespace's sessions start on its group's leader, as
			// with one group they start on the leader: no forwarding.
			d.EndpointsFor = loadgen.GroupLeadersFirst(ctx, addrs, d.Namespaces, func(ns string) int { return node.SpreadGroup(ns, f.groups) })
		}
	}
	load := loadgen.LoadAvg()
	var meter *loadgen.CPUMeter
	if cluster != nil && cfg.Workload != loadgen.Idle && cfg.Workload != loadgen.Failover && cfg.Workload != loadgen.Watch {
		meter = loadgen.Meter(ctx, cluster)
	}
	res := &loadgen.Result{Driver: d.Name(), Workload: cfg.Workload, Workers: cfg.Workers, Sessions: cfg.Sessions}
	var err error
	switch cfg.Workload {
	case loadgen.Idle:
		ic := loadgen.IdleConfig{Endpoints: addrs, Namespace: g.namespace, Sessions: cfg.Sessions, TTL: f.ttl, Duration: cfg.Duration,
			ConnsPerNode: f.connsPerNode, Progress: os.Stderr}
		if cluster != nil {
			ic.PIDs, ic.LeaderPID = localPIDs(cluster, addrs), func() int { return leaderPID(ctx, cluster) }
		}
		res.Idle, err = loadgen.RunIdle(ctx, ic)
		res.DurationS = cfg.Duration.Seconds()
	case loadgen.Failover:
		res.Failover, err = loadgen.RunFailover(ctx, loadgen.FailoverConfig{Cluster: cluster, Workers: cfg.Workers, Trials: cfg.Trials,
			Gap: f.trialGap, TTL: f.ttl, Prefix: cfg.Prefix, Progress: os.Stderr, Sessions: cfg.Sessions, ConnsPerNode: f.connsPerNode,
			ReattachMin: f.reattachMin, ReattachMax: f.reattachMax, StableFor: f.stableFor, TrialMax: f.trialMax, RestartAfter: f.restartAfter})
		if err == nil {
			res.SessionsLost = res.Failover.SessionsLost
		}
		if cfg.Sessions > 0 {
			res.Workers = 0 // the sessions replace the workers
		}
	case loadgen.Flood:
		fc := loadgen.FloodConfig{Driver: d, Endpoints: addrs, FloodNamespace: g.namespace + "-flood", Opens: f.opens, FloodWorkers: f.floodWorkers,
			Workers: cfg.Workers, Duration: cfg.Duration, Prefix: cfg.Prefix, Progress: os.Stderr}
		if cluster != nil {
			fc.LogIndex = func(ctx context.Context) (uint64, error) {
				i, err := cluster.Leader(ctx, 5*time.Second)
				if err != nil {
					return 0, err
				}
				return loadgen.DigestIndex(ctx, cluster.Nodes[i].HTTP, "")
			}
		}
		res.Flood, err = loadgen.RunFlood(ctx, fc)
		if res.Flood != nil {
			res.DurationS = cfg.Duration.Seconds() + res.Flood.FloodSeconds
		}
	case loadgen.HeldLocks:
		res.Held, err = loadgen.RunHeld(ctx, heldConfig(ctx, d, cfg, cfg.Workers, cluster))
	case loadgen.Snapshots:
		hc := heldConfig(ctx, d, cfg, f.holdWorkers, cluster)
		var a *lockcluster.Admin
		if a, err = g.admin(addrs...); err != nil {
			return err
		}
		defer a.Close()
		res.Snapshot, err = loadgen.RunSnapLat(ctx, loadgen.SnapLatConfig{Held: hc, Probes: cfg.Workers, Duration: cfg.Duration, Every: f.snapEvery, Progress: os.Stderr,
			Snapshot: func(ctx context.Context) (int64, error) {
				info, err := a.SaveSnapshot(ctx, io.Discard)
				return int64(info.Size), err
			}})
		res.DurationS = cfg.Duration.Seconds()
	case loadgen.Watch:
		wc := loadgen.WatchConfig{Run: cfg, Driver: d, Endpoints: addrs, Namespace: g.namespace}
		if cluster != nil {
			// The nodes' CPU over the window only: not the watches' start.
			wc.Meter = func() func() []loadgen.ProcUsage { return loadgen.Meter(ctx, cluster).Stop }
		}
		res, err = loadgen.RunWatch(ctx, wc)
	case loadgen.Move:
		res.Move, err = loadgen.RunMove(ctx, moveConfig(g, f, addrs))
	default:
		res, err = loadgen.Run(ctx, d, cfg)
	}
	if err != nil {
		return err
	}
	if meter != nil {
		res.Processes = meter.Stop()
	}
	if cluster != nil {
		if i, err := cluster.Leader(ctx, 5*time.Second); err == nil {
			res.RaftTimers = loadgen.RaftTimers(ctx, cluster.Nodes[i].HTTP)
		}
	}
	var diverged error
	if cluster != nil {
		res.AppliedHashes, diverged = compareReplicas(ctx, cluster)
	}
	res.LoadAvg, res.Command = []float64{load, loadgen.LoadAvg()}, command
	if g.output == "json" {
		err = printJSON(os.Stdout, res)
	} else {
		err = res.WriteTable(os.Stdout)
	}
	if diverged != nil {
		return diverged
	}
	if err == nil && res.Watch != nil && !res.Watch.Valid {
		return &exitError{code: exitFailure, msg: fmt.Sprintf("not a valid watch run: %d watches cut, %d failed, %d of %d watchers received all %d changes",
			res.Watch.Cut, res.Watch.Failed, res.Watch.Complete, res.Watch.Watchers, res.Watch.Caused)}
	}
	return err
}

// compareReplicas compares the local nodes' running hashes of the entries
// they applied, once they have caught up (up to 30 s): the benchmark's
// writes are checked for divergence like the chaos harness's. The error
// is set when the hashes differ, and the run then exits non-zero.
func compareReplicas(ctx context.Context, c *proccluster.Cluster) (string, error) {
	h := proccluster.CompareAppliedHashes(ctx, c.RunningHTTP(), "", 30*time.Second, 100*time.Millisecond)
	switch {
	case h.Differ():
		what := fmt.Sprintf("DIFFER at index %d: %s", h.At, h.Hashes(", "))
		return what, &exitError{code: exitFailure, msg: "the replicas diverged: applied hashes " + what}
	case h.At == 0:
		return "not compared (no node reported its hash)", nil
	}
	return fmt.Sprintf("equal at index %d (%s)", h.At, h.Hashes(", ")), nil
}

// heldConfig is the held workload's configuration, with workers acquires
// in flight; with a local cluster it measures each node once all are held.
func heldConfig(ctx context.Context, d loadgen.Driver, cfg loadgen.Config, workers int, cluster *proccluster.Cluster) loadgen.HeldConfig {
	hc := loadgen.HeldConfig{Driver: d, Sessions: cfg.Sessions, Locks: cfg.Locks, Workers: workers, Prefix: cfg.Prefix, Hold: cfg.Hold, Progress: os.Stderr}
	if cluster != nil {
		hc.Measure = func() []loadgen.ProcUsage { return loadgen.Meter(ctx, cluster).Stop() }
	}
	return hc
}

// localPIDs returns the pids of the nodes serving addrs, in that order.
func localPIDs(c *proccluster.Cluster, addrs []string) []int {
	var out []int
	for _, a := range addrs {
		for i, nd := range c.Nodes {
			if nd.GRPC == a {
				out = append(out, c.PID(i))
			}
		}
	}
	return out
}

func leaderPID(ctx context.Context, c *proccluster.Cluster) int {
	i, err := c.Leader(ctx, 5*time.Second)
	if err != nil {
		return 0
	}
	return c.PID(i)
}

// spreadNamespaces picks k namespaces base-0, base-1, ... so that each of
// groups groups serves as many as the others (one more for the first k
// mod groups), by the spread of a cluster of that many groups.
// moveConfig is the move workload's: the moved namespace and the control
// namespace both in group 0 (the source: the control feels the freeze and
// the export if anything does), the slot going to group 1 and back.
func moveConfig(g *globals, f *benchFlags, addrs []string) loadgen.MoveConfig {
	var moved, control string
	for i := 0; control == ""; i++ {
		ns := fmt.Sprintf("%s-move-%d", g.namespace, i)
		if node.SpreadGroup(ns, f.groups) != 0 {
			continue
		}
		if moved == "" {
			moved = ns
		} else if lockcluster.SlotOf(ns) != lockcluster.SlotOf(moved) {
			control = ns
		}
	}
	held := f.cfg.Locks
	if held == 100_000 { // the flag's default is the held workload's
		held = 5000
	}
	return loadgen.MoveConfig{Endpoints: addrs, Moved: moved, Control: control, Groups: [2]int{0, 1}, Held: held, Pending: min(f.pending, held),
		Sessions: 100, Probes: max(f.cfg.Workers/2, 1), Moves: f.moves, Every: f.moveEvery, Progress: os.Stderr}
}

func spreadNamespaces(base string, k, groups int) []string {
	groups = max(groups, 1)
	per := make([]int, groups)
	var out []string
	for i := 0; len(out) < k; i++ {
		ns := fmt.Sprintf("%s-%d", base, i)
		g := node.SpreadGroup(ns, groups)
		if per[g] < (k+groups-1-g)/groups {
			per[g]++
			out = append(out, ns)
		}
	}
	return out
}

// Command jepsen-lite is lockcluster's chaos harness: it runs a cluster of
// the real binary, drives concurrent client workloads against it while it
// injects faults, heals, and then checks the recorded history.
//
//	go run -tags hashicorpmetrics ./test/jepsen-lite                    # 60 s, every workload and nemesis
//	go run -tags hashicorpmetrics ./test/jepsen-lite --time 10m --nemesis all --out /tmp/chaos
//
// The cluster is three `lockcluster serve` processes on loopback (built
// from this repository, or --bin), every raft link through a fault proxy of
// the harness (proxy.go, wired with serve --raft-dial), or with --docker
// the docker compose cluster of docker-compose.yml (docker.go).
//
// Workloads (--workload, workloads.go): an exclusive mutex guarding a
// fenced register, long holds (leases), readers-writer, ifAvailable,
// steal, abort by timeout, scoped requests, records written under the
// lock and read (records.go); an observer queries throughout, and a few
// watches (--watchers, watch.go) stream the namespace's changes. Some
// mutex clients run as separate processes (clientproc.go) so that they
// can be paused.
//
// Nemeses (--nemesis, nemesis.go): kill and pause a node or the leader,
// pause a client process past its TTL, isolate the leader, split, bridge,
// one-way cuts, delay, restart the whole cluster, pause the leader after a
// follower restarted and resume it into a newer term (stale-leader);
// "partition" and "all" name groups. One fault at a time, each bounded,
// all healed at the end.
//
// The history (history.jsonl in --out: every invoke, ok, fail and info
// with CLOCK_MONOTONIC timestamps) goes through ten checkers: mutual
// exclusion and fencing (check_mutex.go), linearizability with porcupine
// (check_lin.go), FIFO (check_fifo.go), liveness, no lost
// acknowledgement, equal state digests and equal applied hashes at a
// common index (check_live.go), the records as registers with porcupine
// and their fencing (check_records.go), and the watches against each
// other and against the log read from a stopped node (check_watch.go). The summary
// table goes to stdout and summary.txt, the verdicts to results.json, and
// porcupine's HTML visualisation next to the history when linearizability
// fails. Exit status: 0 when every checker passes, 1 when one fails, 2 when
// the run could not be made. docs/chaos.md says how to read a failure.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"time"
)

// checkFile checks a history written by an earlier run.
func checkFile(path string, cfg config, out io.Writer) int {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(out, "jepsen-lite:", err)
		return 2
	}
	defer f.Close()
	ops, err := ReadHistory(f)
	if err != nil {
		fmt.Fprintln(out, "jepsen-lite:", err)
		return 2
	}
	cfg.Out = filepath.Dir(path)
	res := runChecks(ops, checkOptions{TTL: cfg.TTL, OpTimeout: cfg.OpTimeout, Settle: cfg.settle(), Out: cfg.Out, LinTimeout: cfg.LinTimeout})
	fmt.Fprint(out, summary(ops, res, nil, cfg))
	if !allValid(res) {
		return 1
	}
	return 0
}

func main() {
	if raw := os.Getenv(clientEnv); raw != "" {
		os.Exit(clientMain(raw))
	}
	os.Exit(mainArgs(os.Args[1:], os.Stdout))
}

func mainArgs(args []string, out io.Writer) int {
	fs := flag.NewFlagSet("jepsen-lite", flag.ContinueOnError)
	fs.SetOutput(out)
	cfg := config{Log: out, Nodes: 3}
	var nemeses, workloads string
	fs.DurationVar(&cfg.Time, "time", 60*time.Second, "how long to inject faults under load")
	fs.StringVar(&nemeses, "nemesis", "all", "faults, comma-separated: kill, pause, pause-client, isolate-leader, split, bridge, one-way, delay, restart-cluster, stale-leader, move (with --groups 2 or more); partition; all; none")
	fs.StringVar(&workloads, "workload", "all", "workloads, comma-separated: mutex, lease, rw, steal, scoped, ifavailable, timeout, records; all")
	fs.IntVar(&cfg.WatchHistory, "watch-history", 0, "the nodes' --watch-history: changes kept for watches to resume from (0: the nodes' default); a small one makes the watches Resync after COMPACTED")
	fs.IntVar(&cfg.Groups, "groups", 1, "the nodes' --groups: Raft groups of the cluster (the move nemesis moves the namespace's slot between them; it is skipped with one)")
	fs.IntVar(&cfg.Watchers, "watchers", 3, "watches of every name of the namespace for the whole run (one more of the records' names with --workload records); 0: none")
	fs.IntVar(&cfg.Clients, "clients", 14, "client goroutines (each its own session), spread over the workloads")
	fs.IntVar(&cfg.ClientProcs, "client-procs", 2, "client processes running the mutex workload (pause-client pauses them)")
	fs.Int64Var(&cfg.Seed, "seed", time.Now().UnixNano(), "random seed of the workloads and the nemesis schedule")
	fs.StringVar(&cfg.Out, "out", "", "directory for the history, the node logs and the reports (default: a new one under $TMPDIR)")
	fs.StringVar(&cfg.Bin, "bin", "", "the lockcluster binary (default: build it from this repository)")
	fs.BoolVar(&cfg.Docker, "docker", false, "drive the docker compose cluster of --compose instead of local processes")
	fs.StringVar(&cfg.Compose, "compose", "docker-compose.yml", "the compose file, with --docker")
	fs.DurationVar(&cfg.TTL, "ttl", 5*time.Second, "session TTL of the clients")
	fs.DurationVar(&cfg.OpTimeout, "op-timeout", 10*time.Second, "deadline of a blocking lock request")
	fs.DurationVar(&cfg.Recovery, "recovery", 0, "load after the heal (default: TTL + 15s)")
	fs.DurationVar(&cfg.LinTimeout, "lin-timeout", time.Minute, "porcupine's time limit per lock name")
	recheck := fs.String("check", "", "only check the history file given (history.jsonl of an earlier run, with that run's --ttl and --op-timeout)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if cfg.Nemeses, err = parseNemeses(nemeses); err != nil {
		fmt.Fprintln(out, "jepsen-lite:", err)
		return 2
	}
	if cfg.Workloads, err = parseWorkloads(workloads); err != nil {
		fmt.Fprintln(out, "jepsen-lite:", err)
		return 2
	}
	if cfg.Recovery == 0 {
		cfg.Recovery = cfg.settle() + 10*time.Second
	}
	if *recheck != "" {
		return checkFile(*recheck, cfg, out)
	}
	if cfg.Out == "" {
		if cfg.Out, err = os.MkdirTemp("", "jepsen-lite-"+time.Now().Format("20060102-150405")+"-"); err != nil {
			fmt.Fprintln(out, "jepsen-lite:", err)
			return 2
		}
	}
	if cfg.Out, err = filepath.Abs(cfg.Out); err != nil {
		fmt.Fprintln(out, "jepsen-lite:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(out, "jepsen-lite:", err)
		return 2
	}
	if !allValid(res) {
		return 1
	}
	return 0
}

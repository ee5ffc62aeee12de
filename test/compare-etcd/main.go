// Command compare-etcd runs the lock workloads of 'lockcluster bench'
// against lockcluster and against etcd (go.etcd.io/etcd/client/v3/concurrency)
// in one run, on the same machine and disk, both with fsync on, and prints
// both and their ratio. Its last line is
//
//	ratio lockcluster/etcd uncontended=X contended=Y
//
// (pairs per second for uncontended, hand-offs per second for contended,
// at the first --workers value).
//
// It lives in its own module so that the lockcluster module never depends
// on etcd. Usage, from this directory:
//
//	go build -tags hashicorpmetrics -o /tmp/lockcluster ../../cmd/lockcluster
//	go run . --lockcluster-bin /tmp/lockcluster --workloads uncontended,contended --workers 64
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/lockcluster/lockcluster/internal/loadgen"
	"github.com/lockcluster/lockcluster/internal/proccluster"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "member" {
		if err := runMember(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "member:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "compare-etcd:", err)
		os.Exit(1)
	}
}

// pair is one workload at one worker count on both systems.
type pair struct {
	Workload    string          `json:"workload"`
	Workers     int             `json:"workers"`
	Lockcluster *loadgen.Result `json:"lockcluster"`
	Etcd        *loadgen.Result `json:"etcd"`
	Ratio       float64         `json:"ratio"` // lockcluster/etcd of the headline rate
}

// headline is the rate a workload is judged by.
func headline(r *loadgen.Result) float64 {
	if r.Workload == loadgen.Contended && r.HandoffsPerSec > 0 {
		return r.HandoffsPerSec
	}
	return r.PairsPerSec
}

func run() error {
	bin := flag.String("lockcluster-bin", "", "the lockcluster binary to start a local 3-node cluster with")
	addr := flag.String("lockcluster-addr", "", "or: an existing lockcluster cluster's endpoints, comma-separated")
	workloads := flag.String("workloads", "uncontended,contended", "comma-separated: uncontended, contended, rw, ifavailable, churn")
	workersList := flag.String("workers", "64,1", "comma-separated worker counts; the uncontended/contended ratio line uses the first, the single-worker line a run of 1")
	duration := flag.Duration("duration", 10*time.Second, "measured window of each run")
	warmup := flag.Duration("warmup", time.Second, "warm-up before each run")
	hold := flag.Duration("hold", 0, "how long each lock is held")
	writeRatio := flag.Float64("write-ratio", 0.2, "rw: share of exclusive requests")
	baseline := flag.Int("baseline", 200, "contended, rw: single-worker acquires measuring one commit first")
	out := flag.String("o", "table", "table or json")
	flag.Parse()
	if (*bin == "") == (*addr == "") {
		return fmt.Errorf("give exactly one of --lockcluster-bin and --lockcluster-addr")
	}
	var workers []int
	for _, w := range strings.Split(*workersList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil {
			return fmt.Errorf("--workers %q: %v", w, err)
		}
		workers = append(workers, n)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	lcAddrs := strings.Split(*addr, ",")
	var lc *proccluster.Cluster
	if *bin != "" {
		fmt.Fprintln(os.Stderr, "starting lockcluster (3 serve processes)...")
		var err error
		if lc, err = loadgen.StartLocal(ctx, *bin, 3, nil); err != nil {
			return err
		}
		defer lc.Stop()
		lcAddrs = lc.Addrs()
	}
	fmt.Fprintln(os.Stderr, "starting etcd (3 member processes)...")
	ec, err := startEtcd(ctx)
	if err != nil {
		return err
	}
	defer ec.stop()

	var pairs []pair
	for _, wl := range strings.Split(*workloads, ",") {
		for _, w := range workers {
			cfg := loadgen.Config{Workload: strings.TrimSpace(wl), Workers: w, Duration: *duration, Warmup: *warmup, Hold: *hold,
				WriteRatio: *writeRatio, Baseline: *baseline, Progress: os.Stderr}
			p := pair{Workload: cfg.Workload, Workers: w}
			fmt.Fprintf(os.Stderr, "== lockcluster %s, %d workers\n", cfg.Workload, w)
			d := &loadgen.Lockcluster{Endpoints: loadgen.LeaderFirst(ctx, lcAddrs)}
			if p.Lockcluster, err = measure(ctx, d, cfg, lcPIDs(lc)); err != nil {
				return fmt.Errorf("lockcluster %s: %w", cfg.Workload, err)
			}
			fmt.Fprintf(os.Stderr, "== etcd %s, %d workers\n", cfg.Workload, w)
			ed := &etcdDriver{endpoints: ec.clients, ttl: 10, rw: cfg.Workload == loadgen.RW}
			if p.Etcd, err = measure(ctx, ed, cfg, ec.pids()); err != nil {
				return fmt.Errorf("etcd %s: %w", cfg.Workload, err)
			}
			if e := headline(p.Etcd); e > 0 {
				p.Ratio = float64(int64(headline(p.Lockcluster)/e*100)) / 100
			}
			pairs = append(pairs, p)
		}
	}
	if *out == "json" {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(pairs); err != nil {
			return err
		}
	} else {
		printTable(pairs)
	}
	ratio := func(wl string) string {
		for _, p := range pairs {
			if p.Workload == wl && p.Workers == workers[0] {
				return strconv.FormatFloat(p.Ratio, 'f', 2, 64)
			}
		}
		return "n/a"
	}
	// The last line keeps its form; the single-worker line comes before it.
	fmt.Printf("ratio lockcluster/etcd single-worker-acquire-p50=%s\n", singleWorkerRatio(pairs))
	fmt.Printf("ratio lockcluster/etcd uncontended=%s contended=%s\n", ratio(loadgen.Uncontended), ratio(loadgen.Contended))
	return nil
}

// singleWorkerRatio is etcd's acquire p50 over ours with one worker (>= 1
// when lockcluster is faster): from an uncontended one-worker run, or else
// any one-worker run, or else the contended runs' one-commit baselines.
func singleWorkerRatio(pairs []pair) string {
	format := func(etcd, ours float64) string {
		if etcd <= 0 || ours <= 0 {
			return "n/a"
		}
		return strconv.FormatFloat(etcd/ours, 'f', 2, 64)
	}
	for _, wl := range []string{loadgen.Uncontended, ""} {
		for _, p := range pairs {
			if p.Workers == 1 && (wl == "" || p.Workload == wl) {
				return format(p.Etcd.Acquire.P50MS, p.Lockcluster.Acquire.P50MS)
			}
		}
	}
	for _, p := range pairs {
		if p.Etcd.CommitP50MS > 0 && p.Lockcluster.CommitP50MS > 0 {
			return format(p.Etcd.CommitP50MS, p.Lockcluster.CommitP50MS)
		}
	}
	return "n/a"
}

// measure runs one workload and adds the servers' CPU and RSS.
func measure(ctx context.Context, d loadgen.Driver, cfg loadgen.Config, pids []int) (*loadgen.Result, error) {
	var meter *loadgen.CPUMeter
	if pids != nil {
		names := make([]string, len(pids))
		for i := range pids {
			names[i] = fmt.Sprintf("%s server %d", d.Name(), i)
		}
		meter = loadgen.StartCPU(append(names, "bench (this process)"), append(pids, 0))
	}
	load := loadgen.LoadAvg()
	r, err := loadgen.Run(ctx, d, cfg)
	if err != nil {
		return nil, err
	}
	if meter != nil {
		r.Processes = meter.Stop()
	}
	r.LoadAvg = []float64{load, loadgen.LoadAvg()}
	return r, nil
}

func printTable(pairs []pair) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "workload\tworkers\tsystem\tpairs/s\thand-offs/s\tacquire p50\tp99\thand-off p50\tp99\tcommit p50\terrors\tserver CPU (cores)\tload")
	for _, p := range pairs {
		for _, r := range []*loadgen.Result{p.Lockcluster, p.Etcd} {
			cpu := 0.0
			for _, pr := range r.Processes {
				if !strings.HasPrefix(pr.Name, "bench") {
					cpu += pr.Cores
				}
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%.0f\t%.0f\t%.2fms\t%.2fms\t%.2fms\t%.2fms\t%.2fms\t%d\t%.2f\t%.2f→%.2f\n", p.Workload, p.Workers, r.Driver,
				r.PairsPerSec, r.HandoffsPerSec, r.Acquire.P50MS, r.Acquire.P99MS, r.Handoff.P50MS, r.Handoff.P99MS, r.CommitP50MS, r.Errors, cpu,
				r.LoadAvg[0], r.LoadAvg[1])
		}
		fmt.Fprintf(tw, "%s\t%d\tratio\t%.2f×\n", p.Workload, p.Workers, p.Ratio)
	}
	tw.Flush()
}

func lcPIDs(lc *proccluster.Cluster) []int {
	if lc == nil {
		return nil
	}
	var out []int
	for i := range lc.Nodes {
		out = append(out, lc.PID(i))
	}
	return out
}

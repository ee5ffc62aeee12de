package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// config is one run's configuration (the flags).
type config struct {
	Time       time.Duration // faults and load
	Recovery   time.Duration // load after the heal
	TTL        time.Duration // client sessions
	OpTimeout  time.Duration // deadline of a blocking request
	LinTimeout time.Duration // porcupine, per lock name
	Nemeses    []string
	Workloads  []string
	Clients    int // client goroutines in the harness
	Watchers   int // watches of every name (watch.go)
	// WatchHistory is the nodes' --watch-history (0: their default); a
	// small one makes watches resume into COMPACTED and Resync.
	WatchHistory int
	// Groups is the nodes' --groups (0 or 1: one group); the move
	// nemesis needs 2 or more.
	Groups      int
	ClientProcs int // client processes (mutex workload), the ones pause-client pauses
	Nodes       int
	Seed        int64
	Out         string
	Bin         string
	BuildTags   []string // extra tags when the harness builds the binary
	Docker      bool
	Compose     string // docker-compose.yml
	Log         io.Writer
}

// settle is how long the cluster has after the heal before every blocking
// request must be granted: a session lost during the faults expires a TTL
// after its last heartbeat, and an election takes a few seconds.
func (c config) settle() time.Duration { return c.TTL + 5*time.Second }

type runner struct {
	cfg         config
	c           Cluster
	rec         *Recorder
	reg         *Register
	ns          string
	procMu      sync.Mutex
	nextProcess int // the next process number to give out (newProcess)
	faults      *nemesis
	watches     *watchers
}

// newProcess gives out a process number no client has had.
func (rn *runner) newProcess() int {
	rn.procMu.Lock()
	defer rn.procMu.Unlock()
	rn.nextProcess++
	return rn.nextProcess - 1
}

// pinnedWorkloads are the workloads of the clients the stale-leader
// nemesis pins to the leader, the busiest writers first.
var pinnedWorkloads = []string{wMutex, wRecords, wIfAvailable, wSteal, wRW, wScoped, wTimeout, wLease}

// pinned returns the nemesis's pin: it starts three client goroutines,
// recorded like every other, whose only endpoint is node i's, running the
// run's busiest workloads. Their stop lets each finish the operation under
// way and close its session; wg (load's) waits for them.
func (rn *runner) pinned(ctx context.Context, base workerConfig, wg *sync.WaitGroup) func(i int, seed int64) func() {
	var wls []string
	for _, w := range pinnedWorkloads {
		if contains(rn.cfg.Workloads, w) {
			wls = append(wls, w)
		}
	}
	return func(i int, seed int64) func() {
		pctx, stop := context.WithCancel(ctx)
		if len(wls) == 0 {
			return stop
		}
		rng := rand.New(rand.NewSource(seed))
		for k := range 3 {
			wc := base
			wc.Endpoints = []string{rn.c.Endpoints()[i]}
			wc.Process, wc.Workload, wc.Seed = rn.newProcess(), wls[k%len(wls)], rng.Int63()
			w := newWorker(wc, rn.rec, rn.reg)
			wg.Add(1)
			go func() { defer wg.Done(); w.run(pctx) }()
		}
		return stop
	}
}

func (rn *runner) logf(format string, args ...any) {
	fmt.Fprintf(rn.cfg.Log, "jepsen-lite: "+format+"\n", args...)
}

// run performs one run and checks it; the error is for a run that could
// not be made at all (no binary, no cluster).
func run(ctx context.Context, cfg config) ([]checkResult, error) {
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	rn := &runner{cfg: cfg, ns: fmt.Sprintf("jepsen-%d", time.Now().UnixNano())}
	c, err := rn.cluster()
	if err != nil {
		return nil, err
	}
	rn.c = c
	defer c.Close()
	rn.logf("seed %d; starting the cluster (%s)", cfg.Seed, cfg.Out)
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = c.Start(sctx)
	if err == nil {
		err = waitReady(sctx, c, 30*time.Second)
	}
	cancel()
	if err != nil {
		return nil, fmt.Errorf("starting the cluster: %w", err)
	}
	if rn.rec, err = NewRecorder(filepath.Join(cfg.Out, "history.jsonl")); err != nil {
		return nil, err
	}
	rn.reg = NewRegister(rn.rec)
	lctx, stop := context.WithCancel(ctx) // ends the register's HTTP server too
	rn.load(lctx)
	stop()
	rn.logf("final phase: quiescence, final holds, digests")
	rn.final(ctx)
	watching := rn.watches != nil && len(rn.watches.all) > 0
	if watching {
		rn.logf("stopping the watches once they reach the end marker")
		rn.watches.stop(ctx, 30*time.Second)
	}
	if watching || contains(cfg.Workloads, wRecords) {
		rn.logf("reading the log's history from the stopped nodes")
		c.Close()
		rn.readLogs()
	}
	if err := rn.rec.Close(); err != nil {
		return nil, err
	}
	rn.logf("checking %d history entries", len(rn.rec.Ops()))
	res := runChecks(rn.rec.Ops(), checkOptions{TTL: cfg.TTL, OpTimeout: cfg.OpTimeout, Settle: cfg.settle(), Out: cfg.Out, LinTimeout: cfg.LinTimeout})
	sum := summary(rn.rec.Ops(), res, rn.faults, cfg)
	fmt.Fprint(cfg.Log, sum)
	_ = os.WriteFile(filepath.Join(cfg.Out, "summary.txt"), []byte(sum), 0o644)
	b, _ := json.MarshalIndent(map[string]any{"valid": allValid(res), "checks": res, "seed": cfg.Seed, "namespace": rn.ns,
		"time": cfg.Time.String(), "nemeses": cfg.Nemeses, "workloads": cfg.Workloads}, "", "  ")
	_ = os.WriteFile(filepath.Join(cfg.Out, "results.json"), b, 0o644)
	return res, nil
}

func (rn *runner) cluster() (Cluster, error) {
	if rn.cfg.Docker {
		return newDockerCluster(rn.cfg.Compose)
	}
	bin := rn.cfg.Bin
	if bin == "" {
		rn.logf("building lockcluster (tags hashicorpmetrics %v)", rn.cfg.BuildTags)
		var err error
		if bin, err = buildBinary(rn.cfg.Out, rn.cfg.BuildTags...); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(rn.cfg.Out, "nodes")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	var extra []string
	if rn.cfg.WatchHistory > 0 {
		extra = append(extra, fmt.Sprintf("--watch-history=%d", rn.cfg.WatchHistory))
	}
	if rn.cfg.Groups > 1 {
		extra = append(extra, fmt.Sprintf("--groups=%d", rn.cfg.Groups))
	}
	return newLocalCluster(bin, data, rn.cfg.Nodes, extra...)
}

// load runs the clients and the nemesis: faults for Time, the heal, then
// Recovery more of load, then stops every client.
func (rn *runner) load(ctx context.Context) {
	cfg := rn.cfg
	rng := rand.New(rand.NewSource(cfg.Seed))
	wctx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	base := workerConfig{Endpoints: rn.c.Endpoints(), Namespace: rn.ns, TTL: cfg.TTL, OpTimeout: cfg.OpTimeout}
	var wg sync.WaitGroup
	p := 1
	spawn := func(workload string) {
		wc := base
		wc.Process, wc.Workload, wc.Seed = p, workload, rng.Int63()
		w := newWorker(wc, rn.rec, rn.reg)
		wg.Add(1)
		go func() { defer wg.Done(); w.run(wctx) }()
		p++
	}
	for i := range cfg.Clients {
		spawn(cfg.Workloads[i%len(cfg.Workloads)])
	}
	spawn(wQuery)
	var procs []*clientProc
	if cfg.ClientProcs > 0 {
		regURL, err := rn.reg.Serve(ctx)
		for range cfg.ClientProcs {
			if err != nil {
				break
			}
			wc := base
			wc.Process, wc.Workload, wc.Seed, wc.Register = p, wMutex, rng.Int63(), regURL
			var cp *clientProc
			cp, err = startClientProc(clientConfig{workerConfig: wc, MaxLife: cfg.Time + cfg.Recovery + 2*time.Minute}, rn.rec, cfg.Out)
			if err == nil {
				procs = append(procs, cp)
			}
			p++
		}
		if err != nil {
			rn.logf("client processes: %v", err)
		}
	}
	rn.nextProcess = p
	rn.watches = rn.startWatchers(ctx, cfg.Watchers)
	rn.logf("%d client goroutines, an observer and %d client processes in namespace %s; faults %v for %s",
		cfg.Clients, len(procs), rn.ns, cfg.Nemeses, cfg.Time)
	rn.faults = &nemesis{c: rn.c, kinds: cfg.Nemeses, rng: rand.New(rand.NewSource(rng.Int63())), sink: rn.rec,
		clients: procs, holding: rn.rec.Holding, ttl: cfg.TTL, pin: rn.pinned(wctx, base, &wg), ns: rn.ns, groups: max(cfg.Groups, 1)}
	nctx, cancel := context.WithTimeout(ctx, cfg.Time)
	rn.faults.run(nctx)
	cancel()
	if err := rn.c.HealAll(); err != nil {
		rn.logf("healing: %v", err)
	}
	for _, cp := range procs {
		_ = cp.Resume()
	}
	rn.rec.Add(Op{Process: nemesisProcess, Type: "event", F: "nemesis", Result: "heal", Value: "every fault healed"})
	rn.logf("healed; %s more of load", cfg.Recovery)
	sleepCtx(ctx, cfg.Recovery)
	stopWorkers()
	for _, cp := range procs {
		cp.stop(30 * time.Second)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(cfg.OpTimeout + 30*time.Second):
		rn.logf("some clients did not stop in time; the liveness checker will say which")
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"time"
)

// The faults. Each is bounded: it starts, lasts a few seconds and is
// healed; one runs at a time, and at the end every fault is healed.
const (
	nKill           = "kill"            // SIGKILL a node (the leader half the time), restart it
	nPause          = "pause"           // SIGSTOP a node (the leader half the time), SIGCONT it
	nPauseClient    = "pause-client"    // SIGSTOP a client process while it holds a lock, longer than its TTL
	nIsolateLeader  = "isolate-leader"  // cut the leader off from every other node
	nSplit          = "split"           // majority / minority
	nBridge         = "bridge"          // two halves that only a bridge node sees both of
	nOneWay         = "one-way"         // the leader's links in one direction only
	nDelay          = "delay"           // 50–250 ms more on every link
	nRestartCluster = "restart-cluster" // SIGKILL every node, restart them all
	// nStaleLeader ("stale-leader", nemesis_stale.go): restart a follower,
	// SIGSTOP the leader as it comes back, SIGCONT it once the others have
	// elected a new leader.
)

var allNemeses = []string{nKill, nPause, nPauseClient, nIsolateLeader, nSplit, nBridge, nOneWay, nDelay, nRestartCluster, nStaleLeader, nMove}

var nemesisGroups = map[string][]string{
	"all":       allNemeses,
	"partition": {nIsolateLeader, nSplit, nBridge, nOneWay},
	"none":      {},
}

func parseNemeses(s string) ([]string, error) {
	var out []string
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		if k == "" {
			continue
		}
		if g, ok := nemesisGroups[k]; ok {
			out = append(out, g...)
			continue
		}
		found := false
		for _, n := range allNemeses {
			found = found || n == k
		}
		if !found {
			return nil, fmt.Errorf("unknown nemesis %q (have %s, partition, all, none)", k, strings.Join(allNemeses, ", "))
		}
		out = append(out, k)
	}
	return out, nil
}

// nemesis injects faults into a cluster and its client processes.
type nemesis struct {
	c       Cluster
	kinds   []string
	rng     *rand.Rand
	sink    Sink
	clients []*clientProc
	holding func(process int) bool
	ttl     time.Duration
	// states reports the nodes' status (adminStates unless a test fakes
	// it), polled every pollEvery.
	states    func(ctx context.Context, idx []int) []nodeState
	pollEvery time.Duration
	bound     time.Duration // of each wait of stale-leader (staleLeaderBound)
	shorten   int           // tests: hold divides every fault's duration by it
	// pin starts clients whose only endpoint is node i's (seeded with
	// seed) and returns what stops them; nil: none.
	pin func(i int, seed int64) (stop func())
	// ns and groups: the run's namespace and the cluster's Raft groups
	// (the move nemesis, nemesis_move.go).
	ns      string
	groups  int
	n       int // faults so far
	counts  map[string]int
	skipped map[string]int
}

// run injects faults until ctx ends, then heals everything.
func (nm *nemesis) run(ctx context.Context) {
	nm.counts, nm.skipped = map[string]int{}, map[string]int{}
	if nm.states == nil {
		nm.states = adminStates(nm.c)
	}
	if nm.pollEvery == 0 {
		nm.pollEvery = 50 * time.Millisecond
	}
	if nm.bound == 0 {
		nm.bound = staleLeaderBound
	}
	if len(nm.kinds) == 0 {
		<-ctx.Done()
		return
	}
	for {
		sleepCtx(ctx, time.Duration(1000+nm.rng.Intn(2000))*time.Millisecond)
		if ctx.Err() != nil {
			return
		}
		kind := nm.kinds[nm.rng.Intn(len(nm.kinds))]
		if err := nm.inject(ctx, kind); errors.Is(err, errUnsupported) {
			nm.skipped[kind]++
		} else if err != nil {
			nm.record(kind, "error", err.Error())
		}
	}
}

func (nm *nemesis) record(kind, result, value string) {
	nm.sink.Add(Op{Process: nemesisProcess, Type: "event", F: "nemesis", Hold: fmt.Sprintf("n%d", nm.n), Workload: kind, Result: result, Value: value})
}

// hold waits for a fault's duration, cut short when the run ends.
func (nm *nemesis) hold(ctx context.Context, lo, hi time.Duration) {
	d := lo + time.Duration(nm.rng.Int63n(int64(hi-lo)+1))
	if nm.shorten > 0 {
		d /= time.Duration(nm.shorten)
	}
	sleepCtx(ctx, d)
}

func (nm *nemesis) target(ctx context.Context) int {
	if nm.rng.Intn(2) == 0 {
		if l := leader(ctx, nm.c); l >= 0 {
			return l
		}
	}
	return nm.rng.Intn(nm.c.Size())
}

func (nm *nemesis) inject(ctx context.Context, kind string) error {
	nm.n++
	size := nm.c.Size()
	switch kind {
	case nKill, nPause:
		i := nm.target(ctx)
		stop, start := nm.c.Kill, nm.c.Restart
		if kind == nPause {
			stop, start = nm.c.Pause, nm.c.Resume
		}
		nm.record(kind, "start", fmt.Sprintf("node%d", i))
		if err := stop(i); err != nil {
			return err
		}
		nm.counts[kind]++
		nm.hold(ctx, 2*time.Second, 6*time.Second)
		nm.record(kind, "stop", fmt.Sprintf("node%d", i))
		return start(i)
	case nRestartCluster:
		nm.record(kind, "start", "every node")
		for i := range size {
			if err := nm.c.Kill(i); err != nil {
				return err
			}
		}
		nm.counts[kind]++
		nm.hold(ctx, time.Second, 2*time.Second)
		nm.record(kind, "stop", "every node")
		for i := range size {
			if err := nm.c.Restart(i); err != nil {
				return err
			}
		}
		return nil
	case nPauseClient:
		return nm.pauseClient(ctx)
	case nStaleLeader:
		return nm.staleLeader(ctx)
	case nMove:
		return nm.move(ctx)
	case nDelay:
		net := nm.c.Net()
		if net == nil {
			return errUnsupported
		}
		d := time.Duration(50+nm.rng.Intn(200)) * time.Millisecond
		if err := net.Delay(d); err != nil {
			return err
		}
		nm.record(kind, "start", fmt.Sprintf("+%s on every link", d))
		nm.counts[kind]++
		nm.hold(ctx, 3*time.Second, 8*time.Second)
		nm.record(kind, "stop", "")
		return net.Delay(0)
	}
	return nm.partition(ctx, kind)
}

// partition cuts links per kind, holds, heals.
func (nm *nemesis) partition(ctx context.Context, kind string) error {
	net := nm.c.Net()
	if net == nil {
		return errUnsupported
	}
	size := nm.c.Size()
	cut := square(size)
	both := func(a, b []int) {
		for _, i := range a {
			for _, j := range b {
				cut[i][j], cut[j][i] = true, true
			}
		}
	}
	perm := nm.rng.Perm(size)
	var desc string
	switch kind {
	case nIsolateLeader:
		l := leader(ctx, nm.c)
		if l < 0 {
			l = perm[0]
		}
		rest := []int{}
		for i := range size {
			if i != l {
				rest = append(rest, i)
			}
		}
		both([]int{l}, rest)
		desc = fmt.Sprintf("node%d (leader) isolated", l)
	case nSplit:
		minority := perm[:(size-1)/2]
		both(minority, perm[(size-1)/2:])
		desc = fmt.Sprintf("minority %v | majority %v", nodeNames(minority), nodeNames(perm[(size-1)/2:]))
	case nBridge:
		half := (size - 1) / 2
		both(perm[:half], perm[half+1:])
		desc = fmt.Sprintf("%v | %v, node%d sees both", nodeNames(perm[:half]), nodeNames(perm[half+1:]), perm[half])
	case nOneWay:
		l := leader(ctx, nm.c)
		if l < 0 {
			l = perm[0]
		}
		out := nm.rng.Intn(2) == 0
		for i := range size {
			if i != l {
				if out {
					cut[l][i] = true
				} else {
					cut[i][l] = true
				}
			}
		}
		desc = fmt.Sprintf("nothing from node%d (leader) reaches the others", l)
		if !out {
			desc = fmt.Sprintf("nothing from the others reaches node%d (leader)", l)
		}
	}
	if err := net.Cut(cut); err != nil {
		return err
	}
	nm.record(kind, "start", desc)
	nm.counts[kind]++
	nm.hold(ctx, 3*time.Second, 8*time.Second)
	nm.record(kind, "stop", desc)
	return net.Heal()
}

func nodeNames(ix []int) []string {
	out := make([]string, len(ix))
	for k, i := range ix {
		out[k] = fmt.Sprintf("node%d", i)
	}
	return out
}

// pauseClient SIGSTOPs a client process, preferably one holding a lock,
// for longer than its session TTL: the cluster expires its session and
// grants the lock to the next in line, and when the process resumes its
// late write must be refused by the fenced register.
func (nm *nemesis) pauseClient(ctx context.Context) error {
	if len(nm.clients) == 0 {
		return errUnsupported
	}
	p := nm.clients[nm.rng.Intn(len(nm.clients))]
	deadline := time.Now().Add(3 * time.Second)
	for found := false; !found && time.Now().Before(deadline) && ctx.Err() == nil; {
		for _, c := range nm.clients {
			if nm.holding(c.id) {
				p, found = c, true
				break
			}
		}
		if !found {
			time.Sleep(5 * time.Millisecond)
		}
	}
	desc := fmt.Sprintf("client process %d", p.id)
	nm.sink.Add(Op{Process: nemesisProcess, Type: "event", F: "nemesis", Hold: fmt.Sprintf("n%d", nm.n), Workload: nPauseClient, Result: "start", Value: desc, Client: p.id})
	if err := p.Pause(); err != nil {
		return err
	}
	nm.counts[nPauseClient]++
	// Not cut short by the end of the run: the point is to outlast the TTL.
	time.Sleep(nm.ttl + time.Duration(1500+nm.rng.Intn(1500))*time.Millisecond)
	err := p.Resume()
	nm.sink.Add(Op{Process: nemesisProcess, Type: "event", F: "nemesis", Hold: fmt.Sprintf("n%d", nm.n), Workload: nPauseClient, Result: "stop", Value: desc, Client: p.id})
	return err
}

package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/proccluster"
)

// The final phase runs after every client has stopped: it waits for the
// namespace to empty, holds a few locks on purpose and queries them, waits
// for the namespace to empty again, collects every node's digest, and
// compares the nodes' running hashes of applied entries at a common index.
// What it sees goes into the history (process finalProcess) for the
// checkers.

const finalHolds = 3

func (rn *runner) final(ctx context.Context) {
	sink := rn.rec
	bound := 2*rn.cfg.TTL + 15*time.Second
	obs := newWorker(workerConfig{Process: finalProcess, Workload: "final", Endpoints: rn.c.Endpoints(), Namespace: rn.ns,
		TTL: rn.cfg.TTL, OpTimeout: rn.cfg.OpTimeout}, sink, rn.reg)
	if !obs.dial(withTimeout(ctx, 30*time.Second)) {
		sink.Add(Op{Process: finalProcess, Type: "fail", F: "quiesce", Value: "the final phase could not open a session in 30s"})
		return
	}
	defer obs.c.Close(context.Background())
	rn.quiesce(obs, bound)

	// Fresh clients hold final-0.. at once; a query must show each.
	var wg sync.WaitGroup
	held := make(chan struct{}, finalHolds)
	queried := make(chan struct{})
	for k := range finalHolds {
		w := newWorker(workerConfig{Process: rn.newProcess(), Workload: "final", Endpoints: rn.c.Endpoints(), Namespace: rn.ns,
			TTL: rn.cfg.TTL, OpTimeout: rn.cfg.OpTimeout, Seed: int64(k)}, sink, rn.reg)
		if !w.dial(withTimeout(ctx, 10*time.Second)) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.c.Close(context.Background())
			w.request([]string{fmt.Sprintf("final-%d", k)}, lockcluster.Options{}, rn.cfg.OpTimeout, false,
				func(ctx context.Context, l *lockcluster.Lock, h string) {
					held <- struct{}{}
					<-queried
				})
		}()
	}
	for k := 0; k < finalHolds; k++ {
		select {
		case <-held:
		case <-time.After(rn.cfg.OpTimeout + time.Second):
		}
	}
	obs.query()
	close(queried)
	wg.Wait()
	rn.quiesce(obs, bound)
	rn.digests(ctx)
	rn.rec.Add(appliedHashes(ctx, rn.c, appliedHashBound, 250*time.Millisecond)) // final_hash.go
	for _, c := range rn.c.Crashes() {
		sink.Add(Op{Process: finalProcess, Type: "event", F: "crash", Value: c})
	}
}

func withTimeout(ctx context.Context, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(ctx, d)
	time.AfterFunc(d, cancel)
	return ctx
}

// quiesce queries until nothing is held or queued in the namespace.
func (rn *runner) quiesce(obs *worker, bound time.Duration) {
	deadline := time.Now().Add(bound)
	var last string
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := obs.c.Query(ctx)
		cancel()
		if err == nil && len(s.Held) == 0 && len(s.Pending) == 0 {
			obs.query() // into the history
			rn.rec.Add(Op{Process: finalProcess, Type: "ok", F: "quiesce"})
			return
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("%d held, %d pending, e.g. %+v", len(s.Held), len(s.Pending), append(s.Held, s.Pending...)[0])
		}
		time.Sleep(250 * time.Millisecond)
	}
	obs.query()
	rn.rec.Add(Op{Process: finalProcess, Type: "fail", F: "quiesce",
		Value: fmt.Sprintf("%s after every client closed its session, the namespace is not empty: %s", bound, last)})
}

// digests polls every node's /debug/digest until all have applied the
// same index and agree, or a bound passes.
func (rn *runner) digests(ctx context.Context) {
	bound := 30 * time.Second
	deadline := time.Now().Add(bound)
	var last string
	for time.Now().Before(deadline) {
		ds := make([]proccluster.Digest, rn.c.Size())
		var errs []string
		for i := range ds {
			d, err := digestOf(ctx, rn.c, i)
			if err != nil {
				errs = append(errs, err.Error())
			}
			ds[i] = d
		}
		var parts []string
		sameIndex, sameDigest, stable := true, true, true
		for _, d := range ds {
			parts = append(parts, fmt.Sprintf("%s index %d digest %.12s", d.ID, d.Index, d.Digest))
			stable = stable && d.Stable
			sameIndex = sameIndex && d.Index == ds[0].Index
			sameDigest = sameDigest && d.Digest == ds[0].Digest
		}
		last = strings.Join(parts, "; ")
		switch {
		case len(errs) > 0:
			last = strings.Join(errs, "; ")
		case stable && sameIndex && sameDigest:
			rn.rec.Add(Op{Process: finalProcess, Type: "ok", F: "digest", Value: "equal digests: " + last})
			return
		case stable && sameIndex:
			rn.rec.Add(Op{Process: finalProcess, Type: "fail", F: "digest", Value: "the nodes applied the same entries but their states differ: " + last})
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	rn.rec.Add(Op{Process: finalProcess, Type: "fail", F: "digest", Value: fmt.Sprintf("digests not equal within %s: %s", bound, last)})
}

package main

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Go's collector lets the heap grow to twice its live size before it
// collects (GOGC=100). A lock service's live heap is mostly its lock state,
// which stays: at a million held locks about 450 MiB, so a node's RSS went
// to 1.1-1.35 GiB. The tuner keeps the growth between collections to at
// most --gc-headroom (default 256 MiB) once the live heap is larger than
// that: GOGC = 100 × headroom / live, between 25 and 100. Below it nothing
// changes. A GOGC set in the environment, or --gc-headroom 0, turns it off.

// gcPercentFor is the GOGC that lets a heap of live bytes grow by at most
// headroom bytes, between 25 and 100.
func gcPercentFor(live, headroom uint64) int {
	if live == 0 || headroom >= live {
		return 100
	}
	return max(25, int(headroom*100/live))
}

// tuneGC reads the live heap every interval and sets GOGC from it until
// ctx ends, when it restores the GOGC it found.
func tuneGC(ctx context.Context, headroom uint64, interval time.Duration) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	current := 100
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return // a Go without the metric: leave Go's default
		}
		if p := gcPercentFor(sample[0].Value.Uint64(), headroom); p != current {
			debug.SetGCPercent(p)
			current = p
		}
	}
}

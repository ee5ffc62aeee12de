package loadgen

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"
)

// The snapshot workload asks what a snapshot of a large state costs the
// clients: it holds cfg.Locks locks (the state a snapshot encodes), then
// runs uncontended acquire+release pairs while it takes a snapshot every
// Every, and splits the pairs' latency into those that overlapped a
// snapshot and the rest.

// SnapLatConfig configures RunSnapLat.
type SnapLatConfig struct {
	Held     HeldConfig    // the locks kept meanwhile (Measure is set here)
	Probes   int           // workers running pairs in the window
	Duration time.Duration // the window
	Every    time.Duration // a snapshot starts this long after the last ended
	// Snapshot takes one snapshot of the cluster's state and returns its
	// size in bytes (e.g. Admin.SaveSnapshot to io.Discard).
	Snapshot func(ctx context.Context) (int64, error)
	Progress io.Writer
}

// SnapLatResult is what RunSnapLat measured.
type SnapLatResult struct {
	Held      *HeldResult `json:"held"`
	Snapshots []Span      `json:"snapshots"` // when each was taken, from the window's start
	Bytes     int64       `json:"snapshot_bytes"`
	// During: pairs that overlapped a snapshot; Outside: the others.
	During       Latency `json:"during"`
	Outside      Latency `json:"outside"`
	DuringPairs  int64   `json:"during_pairs"`
	OutsidePairs int64   `json:"outside_pairs"`
}

// Span is a time interval from the window's start, in seconds.
type Span struct {
	Start float64 `json:"start_s"`
	End   float64 `json:"end_s"`
}

func (r *SnapLatResult) write(w io.Writer) {
	if r.Held != nil {
		r.Held.write(w)
	}
	for i, s := range r.Snapshots {
		fmt.Fprintf(w, "snapshot %d\t%.2fs to %.2fs\t(%.3fs, %d bytes)\n", i+1, s.Start, s.End, s.End-s.Start, r.Bytes)
	}
	fmt.Fprintf(w, "pairs during a snapshot (ms)\t%d pairs\tp50 %.3f\tp99 %.3f\tp99.9 %.3f\tmax %.3f\n", r.DuringPairs, r.During.P50MS, r.During.P99MS, r.During.P999MS, r.During.MaxMS)
	fmt.Fprintf(w, "pairs outside snapshots (ms)\t%d pairs\tp50 %.3f\tp99 %.3f\tp99.9 %.3f\tmax %.3f\n", r.OutsidePairs, r.Outside.P50MS, r.Outside.P99MS, r.Outside.P999MS, r.Outside.MaxMS)
}

// RunSnapLat holds the locks, runs the window, and closes every session.
func RunSnapLat(ctx context.Context, cfg SnapLatConfig) (*SnapLatResult, error) {
	if cfg.Probes < 1 || cfg.Duration <= 0 || cfg.Every <= 0 || cfg.Snapshot == nil {
		return nil, fmt.Errorf("snapshot workload: probes %d, duration %s and every %s must be positive, with a snapshot function", cfg.Probes, cfg.Duration, cfg.Every)
	}
	res := &SnapLatResult{}
	var werr error
	measure := cfg.Held.Measure
	cfg.Held.Measure = func() []ProcUsage {
		werr = res.window(ctx, cfg)
		if measure != nil {
			return measure()
		}
		return nil
	}
	held, err := RunHeld(ctx, cfg.Held)
	res.Held = held
	if err == nil {
		err = werr
	}
	return res, err
}

type pairSpan struct{ t0, t1 time.Duration }

// window runs the probes and the snapshots, then sorts the pairs.
func (r *SnapLatResult) window(ctx context.Context, cfg SnapLatConfig) error {
	ss, err := OpenSessions(ctx, cfg.Held.Driver, cfg.Probes, 64)
	if err != nil {
		return err
	}
	defer closeSessions(ss)
	start := time.Now()
	// A cancel, not a deadline: gRPC fails a call on its own timer at a
	// deadline, possibly before the context says it is done, and such a
	// failure must not count as one.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	time.AfterFunc(cfg.Duration, cancel)
	pairs := make([][]pairSpan, len(ss))
	var first error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("%ssnap/%d", cfg.Held.Prefix, i)
			for wctx.Err() == nil {
				t0 := time.Since(start)
				l, err := s.Lock(wctx, name, false, false)
				if err == nil {
					err = l.Release(wctx)
				}
				if wctx.Err() != nil {
					return
				}
				if err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
					cancel()
					return
				}
				pairs[i] = append(pairs[i], pairSpan{t0, time.Since(start)})
			}
		}()
	}
	for wctx.Err() == nil {
		sleepCtx(wctx, cfg.Every)
		if wctx.Err() != nil {
			break
		}
		t0 := time.Since(start)
		n, err := cfg.Snapshot(wctx)
		if err != nil && wctx.Err() == nil {
			cancel()
			wg.Wait()
			return fmt.Errorf("snapshot: %w", err)
		}
		if err == nil {
			r.Bytes = n
			r.Snapshots = append(r.Snapshots, Span{t0.Seconds(), time.Since(start).Seconds()})
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "%5.1fs snapshot of %d bytes took %.3fs\n", t0.Seconds(), n, time.Since(start).Seconds()-t0.Seconds())
			}
		}
	}
	wg.Wait()
	if first != nil {
		return first
	}
	r.classify(pairs)
	return nil
}

// classify puts each pair into During when it overlapped a snapshot.
func (r *SnapLatResult) classify(pairs [][]pairSpan) {
	spans := append([]Span(nil), r.Snapshots...)
	sort.Slice(spans, func(i, j int) bool { return spans[i].Start < spans[j].Start })
	var during, outside Histogram
	for _, ps := range pairs {
		for _, p := range ps {
			a, b := p.t0.Seconds(), p.t1.Seconds()
			// The first span that ends after the pair began.
			k := sort.Search(len(spans), func(k int) bool { return spans[k].End >= a })
			if k < len(spans) && spans[k].Start <= b {
				during.Record(p.t1 - p.t0)
			} else {
				outside.Record(p.t1 - p.t0)
			}
		}
	}
	r.During, r.Outside = during.Summary(), outside.Summary()
	r.DuringPairs, r.OutsidePairs = during.Count(), outside.Count()
}

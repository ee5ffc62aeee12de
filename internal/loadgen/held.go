package loadgen

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// HeldConfig configures RunHeld.
type HeldConfig struct {
	Driver   Driver
	Sessions int
	Locks    int
	Workers  int // acquires in flight
	Prefix   string
	// Hold keeps every lock this long once all are held, before Measure
	// (time for a snapshot to finish and for profiles to be taken).
	Hold time.Duration
	// Measure is called once every lock is held (e.g. to read each node's
	// RSS); its result is returned.
	Measure  func() []ProcUsage
	Progress io.Writer
}

// HeldResult is what RunHeld measured.
type HeldResult struct {
	Locks       int         `json:"locks"`
	Sessions    int         `json:"sessions"`
	AcquireS    float64     `json:"acquire_s"`
	PerSec      float64     `json:"acquires_per_sec"`
	Acquire     Latency     `json:"acquire"`
	WhileHeld   []ProcUsage `json:"while_held,omitempty"`
	ReleaseAllS float64     `json:"release_all_s"` // closing every session
}

func (r *HeldResult) write(w io.Writer) {
	fmt.Fprintf(w, "held locks\t%d\tover %d sessions\tacquired in %.1fs (%.0f/s)\n", r.Locks, r.Sessions, r.AcquireS, r.PerSec)
	fmt.Fprintf(w, "acquire (ms)\tp50 %.3f\tp99 %.3f\n", r.Acquire.P50MS, r.Acquire.P99MS)
	for _, p := range r.WhileHeld {
		fmt.Fprintf(w, "  RSS while held\t%s\t%.0f MiB\t(anonymous %.0f, file-backed %.0f)\n", p.Name, p.RSSMiB, p.AnonMiB, p.FileMiB)
	}
	fmt.Fprintf(w, "closing the sessions (releases all)\t%.1fs\n", r.ReleaseAllS)
}

// RunHeld acquires cfg.Locks distinct locks over cfg.Sessions sessions,
// keeps them while Measure runs, then closes the sessions.
func RunHeld(ctx context.Context, cfg HeldConfig) (*HeldResult, error) {
	ss, err := OpenSessions(ctx, cfg.Driver, cfg.Sessions, 64)
	if err != nil {
		return nil, err
	}
	res := &HeldResult{Locks: cfg.Locks, Sessions: cfg.Sessions}
	var h Histogram
	var done atomic.Int64
	start := time.Now()
	stopProgress := everySecond(cfg.Progress, func(w io.Writer) {
		fmt.Fprintf(w, "%5.1fs held %d of %d\n", time.Since(start).Seconds(), done.Load(), cfg.Locks)
	})
	err = parallel(ctx, cfg.Locks, cfg.Workers, func(i int) error {
		t0 := time.Now()
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := ss[i%len(ss)].Lock(actx, fmt.Sprintf("%sh/%d", cfg.Prefix, i), false, true)
		cancel()
		if err != nil {
			return fmt.Errorf("lock %d: %w", i, err)
		}
		h.Record(time.Since(t0))
		done.Add(1)
		return nil
	})
	stopProgress()
	res.AcquireS = time.Since(start).Seconds()
	res.PerSec = rate(done.Load(), res.AcquireS)
	res.Acquire = h.Summary()
	if err != nil {
		closeSessions(ss)
		return res, err
	}
	if cfg.Hold > 0 {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "every lock held: keeping them %s\n", cfg.Hold)
		}
		select {
		case <-ctx.Done():
		case <-time.After(cfg.Hold):
		}
	}
	if cfg.Measure != nil {
		res.WhileHeld = cfg.Measure()
	}
	t := time.Now()
	closeSessions(ss)
	res.ReleaseAllS = float64(int64(time.Since(t).Seconds()*10)) / 10
	return res, nil
}

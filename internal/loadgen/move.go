package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockcluster/lockcluster"
)

// MoveConfig configures RunMove: `bench --workload move` (issue 27; groups.md
// §18.2, M3): a namespace's slot moves between two groups, again and
// again, while the namespace holds Held locks and Pending queued requests
// and probe workers take and release locks in it and in a control
// namespace of another group.
type MoveConfig struct {
	Endpoints []string
	Moved     string // the namespace whose slot moves
	Control   string // a namespace of another group: it must not notice
	Groups    [2]int // the moved slot goes Groups[1], Groups[0], Groups[1], ...
	Held      int    // locks held in Moved throughout
	Pending   int    // requests queued behind them throughout
	Sessions  int    // sessions the held locks (and, as many, the pending requests) spread over
	Probes    int    // workers per namespace taking and releasing locks
	Moves     int
	Every     time.Duration // between the end of one move and the next
	Progress  io.Writer
}

// MoveResult is what RunMove measured.
type MoveResult struct {
	Moves   int `json:"moves"`
	Held    int `json:"held"`
	Pending int `json:"pending"`
	// Took: from MoveSlots to every replica of the node asked serving
	// the slot in its new group (Placement settled).
	Took Latency `json:"took"`
	// Stall per move and namespace: the longest probe call that overlapped
	// the move (what a client of the namespace felt); for the control
	// namespace, what it felt of a move it is not part of.
	Stall        Latency `json:"stall"`
	ControlStall Latency `json:"control_stall"`
	// Calls: every probe acquire in each namespace over the whole run.
	Calls        Latency  `json:"calls"`
	ControlCalls Latency  `json:"control_calls"`
	Errors       int64    `json:"errors"`
	ErrorSamples []string `json:"error_samples,omitempty"`
	// LocksLost: held locks a holder lost (its session ended, or the lock
	// was taken from it), and sessions of the run the cluster ended.
	LocksLost    int64 `json:"locks_lost"`
	SessionsLost int64 `json:"sessions_lost"`
}

func (r *MoveResult) write(w io.Writer) {
	fmt.Fprintf(w, "moves\t%d\tof a slot holding %d held and %d pending locks\n", r.Moves, r.Held, r.Pending)
	fmt.Fprintf(w, "move took (ms)\tp50 %.1f\tp99 %.1f\tmax %.1f\n", r.Took.P50MS, r.Took.P99MS, r.Took.MaxMS)
	fmt.Fprintf(w, "stall, moved namespace (ms)\tp50 %.1f\tp99 %.1f\tmax %.1f\n", r.Stall.P50MS, r.Stall.P99MS, r.Stall.MaxMS)
	fmt.Fprintf(w, "stall, control namespace (ms)\tp50 %.1f\tp99 %.1f\tmax %.1f\n", r.ControlStall.P50MS, r.ControlStall.P99MS, r.ControlStall.MaxMS)
	fmt.Fprintf(w, "acquire, moved / control (ms)\tp50 %.2f / %.2f\tp99 %.2f / %.2f\n", r.Calls.P50MS, r.ControlCalls.P50MS, r.Calls.P99MS, r.ControlCalls.P99MS)
	fmt.Fprintf(w, "errors\t%d\tlocks lost %d\tsessions lost %d\n", r.Errors, r.LocksLost, r.SessionsLost)
}

// probeCall is one probe acquire: when it started and ended.
type probeCall struct{ start, end time.Time }

// RunMove runs the move workload.
func RunMove(ctx context.Context, cfg MoveConfig) (*MoveResult, error) {
	if cfg.Sessions <= 0 || cfg.Probes <= 0 || cfg.Moves <= 0 || cfg.Held < 0 || cfg.Pending < 0 || cfg.Pending > cfg.Held {
		return nil, fmt.Errorf("move: sessions %d, probes %d, moves %d, held %d, pending %d: want sessions, probes, moves above 0 and pending at most held",
			cfg.Sessions, cfg.Probes, cfg.Moves, cfg.Held, cfg.Pending)
	}
	admin, err := lockcluster.DialAdmin(cfg.Endpoints)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	dial := func(ns string) (*lockcluster.Client, error) {
		return lockcluster.Dial(ctx, cfg.Endpoints, lockcluster.WithNamespace(ns), lockcluster.WithLabel("bench-move"))
	}
	res := &MoveResult{Held: cfg.Held, Pending: cfg.Pending}
	var errs errorLog
	// The holders, then the waiters queued behind them.
	holders, err := dialN(cfg.Sessions, func() (*lockcluster.Client, error) { return dial(cfg.Moved) })
	if err != nil {
		return nil, err
	}
	defer closeAll(holders)
	held := make([]*lockcluster.Lock, cfg.Held)
	if err := parallel(ctx, cfg.Held, 64, func(i int) error {
		l, err := holders[i%len(holders)].Acquire(ctx, fmt.Sprintf("m/%d", i), lockcluster.Options{})
		held[i] = l
		return err
	}); err != nil {
		return nil, fmt.Errorf("move: holding the locks: %w", err)
	}
	waiters, err := dialN(cfg.Sessions, func() (*lockcluster.Client, error) { return dial(cfg.Moved) })
	if err != nil {
		return nil, err
	}
	defer closeAll(waiters)
	wctx, stopWaiters := context.WithCancel(ctx)
	var waiting sync.WaitGroup
	var granted atomic.Int64
	for i := range cfg.Pending {
		waiting.Add(1)
		go func() {
			defer waiting.Done()
			if _, err := waiters[i%len(waiters)].Acquire(wctx, fmt.Sprintf("m/%d", i), lockcluster.Options{}); err == nil {
				granted.Add(1) // a grant while the holder still holds: a double grant
			}
		}()
	}
	// Every waiter queued: the namespace's query shows them.
	deadline := time.Now().Add(time.Minute)
	for {
		q, err := holders[0].Query(ctx)
		if err == nil && len(q.Pending) >= cfg.Pending {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stopWaiters()
			return nil, fmt.Errorf("move: the %d waiters did not all queue within a minute", cfg.Pending)
		}
		time.Sleep(50 * time.Millisecond)
	}
	progress(cfg.Progress, "move: %d locks held and %d queued in %s over %d+%d sessions", cfg.Held, cfg.Pending, cfg.Moved, len(holders), len(waiters))

	// The probes.
	var calls, ctrlCalls Histogram
	var mu sync.Mutex
	var moved, control []probeCall
	pctx, stopProbes := context.WithCancel(ctx)
	var probing sync.WaitGroup
	for _, p := range []struct {
		ns   string
		h    *Histogram
		into *[]probeCall
	}{{cfg.Moved, &calls, &moved}, {cfg.Control, &ctrlCalls, &control}} {
		for w := range cfg.Probes {
			cl, err := dial(p.ns)
			if err != nil {
				stopProbes()
				stopWaiters()
				return nil, err
			}
			defer cl.Close(context.Background())
			probing.Add(1)
			go func() {
				defer probing.Done()
				for pctx.Err() == nil {
					t0 := time.Now()
					l, err := cl.Acquire(pctx, fmt.Sprintf("p/%d", w), lockcluster.Options{})
					if err == nil {
						err = l.Release(pctx)
					}
					t1 := time.Now()
					if pctx.Err() != nil {
						return
					}
					if err != nil {
						errs.add(fmt.Errorf("probe in %s: %w", p.ns, err))
						continue
					}
					p.h.Record(t1.Sub(t0))
					mu.Lock()
					*p.into = append(*p.into, probeCall{t0, t1})
					mu.Unlock()
				}
			}()
		}
	}
	time.Sleep(cfg.Every) // a baseline before the first move
	slot := lockcluster.SlotOf(cfg.Moved)
	var took, stall, ctrlStall Histogram
	for m := range cfg.Moves {
		to := cfg.Groups[(m+1)%2]
		t0 := time.Now()
		if _, err := admin.MoveSlots(ctx, []int{slot}, to); err != nil {
			errs.add(fmt.Errorf("move %d: %w", m, err))
			break
		}
		for {
			p, err := admin.Placement(ctx, "", slot)
			if err == nil && p.Group == to && !p.Moving {
				break
			}
			if ctx.Err() != nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
		t1 := time.Now()
		took.Record(t1.Sub(t0))
		time.Sleep(cfg.Every) // let the calls that overlapped the move end
		mu.Lock()
		stall.Record(longestOverlap(moved, t0, t1))
		ctrlStall.Record(longestOverlap(control, t0, t1))
		mu.Unlock()
		res.Moves++
		progress(cfg.Progress, "move %d: slot %d to group %d in %.1f ms", m+1, slot, to, float64(t1.Sub(t0).Microseconds())/1e3)
	}
	stopProbes()
	probing.Wait()
	// Every held lock still held, every waiter still waiting.
	for i, l := range held {
		if l.Err() != nil {
			res.LocksLost++
			errs.add(fmt.Errorf("held lock m/%d: %w", i, l.Err()))
		}
	}
	res.LocksLost += granted.Load()
	for _, cl := range append(append([]*lockcluster.Client(nil), holders...), waiters...) {
		if _, err := cl.Query(ctx); errors.Is(err, lockcluster.ErrSessionClosed) || errors.Is(err, lockcluster.ErrSessionLost) {
			res.SessionsLost++
		}
	}
	stopWaiters()
	waiting.Wait()
	res.Took, res.Stall, res.ControlStall = took.Summary(), stall.Summary(), ctrlStall.Summary()
	res.Calls, res.ControlCalls = calls.Summary(), ctrlCalls.Summary()
	res.Errors, res.ErrorSamples = errs.summary()
	return res, nil
}

// longestOverlap is the longest of calls that overlapped [t0, t1].
func longestOverlap(calls []probeCall, t0, t1 time.Time) time.Duration {
	var d time.Duration
	for _, c := range calls {
		if c.end.After(t0) && c.start.Before(t1) {
			d = max(d, c.end.Sub(c.start))
		}
	}
	return d
}

func dialN(n int, dial func() (*lockcluster.Client, error)) ([]*lockcluster.Client, error) {
	out := make([]*lockcluster.Client, 0, n)
	for range n {
		cl, err := dial()
		if err != nil {
			closeAll(out)
			return nil, err
		}
		out = append(out, cl)
	}
	return out, nil
}

func closeAll(cls []*lockcluster.Client) {
	for _, cl := range cls {
		cl.Close(context.Background())
	}
}

// errorLog counts errors and keeps a few.
type errorLog struct {
	mu      sync.Mutex
	n       int64
	samples []string
}

func (e *errorLog) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if len(e.samples) < 5 {
		e.samples = append(e.samples, err.Error())
	}
}

func (e *errorLog) summary() (int64, []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n, e.samples
}

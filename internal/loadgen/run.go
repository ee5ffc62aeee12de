package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// grace is how long in-flight operations may take after the window ends
// before their context is cancelled.
const grace = 10 * time.Second

// runner is the shared state of one lock workload run.
type runner struct {
	cfg   Config
	d     Driver
	start time.Time // every timestamp is time.Since(start): monotonic

	recording atomic.Bool
	stop      atomic.Bool
	pairs     atomic.Int64
	handoffs  atomic.Int64
	attempts  atomic.Int64
	notAvail  atomic.Int64
	reads     atomic.Int64
	writes    atomic.Int64
	opened    atomic.Int64
	errs      atomic.Int64
	// grants and releases count every acquire and release that succeeded,
	// in the window or not (the watch workload's changes).
	grants, releases atomic.Int64

	acquire, release, handoff, open Histogram

	released map[string]*atomic.Int64 // per name: when its last release began

	mu      sync.Mutex
	samples []string
}

func (r *runner) now() time.Duration { return time.Since(r.start) }

func (r *runner) fail(err error) {
	if !r.recording.Load() && r.stop.Load() {
		return // after the window: cancellations of the shutdown
	}
	r.errs.Add(1)
	r.mu.Lock()
	if len(r.samples) < 5 {
		r.samples = append(r.samples, sample(err))
	}
	r.mu.Unlock()
	time.Sleep(10 * time.Millisecond) // no hot loop while the service fails
}

// name is the lock name worker w uses.
func (r *runner) name(w int) string {
	switch r.cfg.Workload {
	case Uncontended, Churn, Watch:
		return fmt.Sprintf("%su/%d", r.cfg.Prefix, w)
	case RW:
		return r.cfg.Prefix + "rw"
	case IfAvailable:
		return r.cfg.Prefix + "ia"
	}
	return r.cfg.Prefix + "c"
}

// Run runs one of the lock workloads (uncontended, contended, rw,
// ifavailable, churn) against d and returns what it measured. The run
// stops after cfg.Duration (plus warm-up) or cfg.MaxOps pairs.
func Run(ctx context.Context, d Driver, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch cfg.Workload {
	case Uncontended, Contended, RW, IfAvailable, Churn:
	default:
		return nil, fmt.Errorf("workload %q is not a lock workload (see RunIdle, RunFailover, RunHeld, RunWatch)", cfg.Workload)
	}
	res, _, err := runLocks(ctx, d, cfg, windowHooks{})
	return res, err
}

// windowHooks are what runLocks calls when the measured window starts and ends
// (either may be nil).
type windowHooks struct{ start, end func() }

// runLocks runs a lock workload of a validated cfg: Run, and the workers of
// RunWatch. It returns the runner too, for its counts over the whole run.
func runLocks(ctx context.Context, d Driver, cfg Config, win windowHooks) (*Result, *runner, error) {
	r := &runner{cfg: cfg, d: d, start: time.Now(), released: map[string]*atomic.Int64{}}
	for w := range cfg.Workers {
		if _, ok := r.released[r.name(w)]; !ok {
			r.released[r.name(w)] = new(atomic.Int64)
		}
	}
	var sessions []Session
	if cfg.Workload != Churn {
		var err error
		if sessions, err = OpenSessions(ctx, d, cfg.Sessions, 64); err != nil {
			return nil, nil, err
		}
		defer closeSessions(sessions)
	}
	res := &Result{Driver: d.Name(), Workload: cfg.Workload, Workers: cfg.Workers, Sessions: cfg.Sessions, HoldMS: ms(cfg.Hold)}
	if cfg.Baseline > 0 && (cfg.Workload == Contended || cfg.Workload == RW) {
		p50, err := baseline(ctx, sessions[0], cfg.Prefix+"baseline", cfg.Baseline)
		if err != nil {
			return nil, nil, fmt.Errorf("baseline: %w", err)
		}
		res.CommitP50MS = ms(p50)
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s Session
			if sessions != nil {
				s = sessions[w%len(sessions)]
			}
			r.work(wctx, w, s)
		}()
	}
	stopProgress := r.progress()
	sleepCtx(ctx, cfg.Warmup)
	r.recording.Store(true)
	if win.start != nil {
		win.start()
	}
	from := r.now()
	deadline := time.NewTimer(cfg.Duration)
	tick := time.NewTicker(10 * time.Millisecond)
	for done := false; !done; {
		select {
		case <-deadline.C:
			done = true
		case <-ctx.Done():
			done = true
		case <-tick.C:
			done = r.pairs.Load() >= cfg.MaxOps
		}
	}
	tick.Stop()
	r.recording.Store(false)
	if win.end != nil {
		win.end()
	}
	r.stop.Store(true)
	window := (r.now() - from).Seconds()
	stopProgress()
	waitGrace(&wg, cancel)

	res.DurationS = float64(int64(window*1000)) / 1000
	res.Pairs, res.Handoffs = r.pairs.Load(), r.handoffs.Load()
	res.PairsPerSec, res.HandoffsPerSec = rate(res.Pairs, window), rate(res.Handoffs, window)
	res.Attempts, res.NotAvailable = r.attempts.Load(), r.notAvail.Load()
	res.Reads, res.Writes, res.SessionsOpened = r.reads.Load(), r.writes.Load(), r.opened.Load()
	res.Errors, res.ErrorSamples = r.errs.Load(), r.samples
	res.Acquire, res.Release, res.Handoff = r.acquire.Summary(), r.release.Summary(), r.handoff.Summary()
	if cfg.Workload == Churn {
		o := r.open.Summary()
		res.Open = &o
	}
	for _, s := range sessions {
		if e, ok := s.(Expirer); ok && e.Lost() {
			res.SessionsLost++
		}
	}
	return res, r, nil
}

// waitGrace waits for the workers, cancelling their context after grace.
func waitGrace(wg *sync.WaitGroup, cancel context.CancelFunc) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		cancel()
		<-done
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// work is one worker's loop.
func (r *runner) work(ctx context.Context, w int, s Session) {
	name := r.name(w)
	rng := rand.New(rand.NewPCG(uint64(w), uint64(r.start.UnixNano())))
	for !r.stop.Load() && ctx.Err() == nil {
		if r.cfg.Workload == Churn {
			r.churn(ctx, name)
			continue
		}
		shared := r.cfg.Workload == RW && rng.Float64() >= r.cfg.WriteRatio
		r.pair(ctx, s, name, shared, r.cfg.Workload == IfAvailable)
	}
}

// pair acquires name, holds it, and releases it, recording what it sees.
func (r *runner) pair(ctx context.Context, s Session, name string, shared, ifAvailable bool) bool {
	t0 := r.now()
	h, err := s.Lock(ctx, name, shared, ifAvailable)
	t1 := r.now()
	rec := r.recording.Load()
	if rec && ifAvailable {
		r.attempts.Add(1)
	}
	if errors.Is(err, ErrNotAvailable) {
		if rec {
			r.notAvail.Add(1)
			r.acquire.Record(t1 - t0)
		}
		return false
	}
	if err != nil {
		r.fail(fmt.Errorf("acquire %q: %w", name, err))
		return false
	}
	r.grants.Add(1)
	slot := r.released[name]
	if rec {
		r.acquire.Record(t1 - t0)
		if !shared {
			// A grant to a request that was waiting when the last release
			// of the name began is a hand-off.
			if rel := time.Duration(slot.Load()); rel > t0 && rel > 0 {
				r.handoff.Record(t1 - rel)
				r.handoffs.Add(1)
			}
		}
		if shared {
			r.reads.Add(1)
		} else if r.cfg.Workload == RW {
			r.writes.Add(1)
		}
	}
	if r.cfg.Hold > 0 {
		time.Sleep(r.cfg.Hold)
	}
	t2 := r.now()
	for { // the latest release start wins (shared holders release concurrently)
		old := slot.Load()
		if int64(t2) <= old || slot.CompareAndSwap(old, int64(t2)) {
			break
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	err = h.Release(rctx)
	cancel()
	t3 := r.now()
	if err != nil {
		r.fail(fmt.Errorf("release %q: %w", name, err))
		return false
	}
	r.releases.Add(1)
	if rec && r.recording.Load() { // the whole pair fell in the window
		r.release.Record(t3 - t2)
		r.pairs.Add(1)
	}
	return true
}

// churn opens a session, takes and releases a lock in it, and closes it.
func (r *runner) churn(ctx context.Context, name string) {
	t0 := r.now()
	s, err := r.d.Open(ctx)
	t1 := r.now()
	if err != nil {
		r.fail(fmt.Errorf("open session: %w", err))
		return
	}
	rec := r.recording.Load()
	if rec {
		r.open.Record(t1 - t0)
	}
	ok := r.pair(ctx, s, name, false, false)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	err = s.Close(cctx)
	cancel()
	if err != nil {
		r.fail(fmt.Errorf("close session: %w", err))
		return
	}
	if ok && rec && r.recording.Load() {
		r.opened.Add(1)
	}
}

// baseline measures one commit: a single worker locking and releasing a
// name nobody else uses, n times; it returns the acquire p50.
func baseline(ctx context.Context, s Session, name string, n int) (time.Duration, error) {
	var h Histogram
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < n && time.Now().Before(deadline); i++ {
		t0 := time.Now()
		l, err := s.Lock(ctx, name, false, false)
		if err != nil {
			return 0, err
		}
		h.Record(time.Since(t0))
		if err := l.Release(ctx); err != nil {
			return 0, err
		}
	}
	return h.Quantile(0.5), nil
}

// progress prints a line a second to cfg.Progress until the returned
// function is called.
func (r *runner) progress() func() {
	var last int64
	return everySecond(r.cfg.Progress, func(w io.Writer) {
		p := r.pairs.Load()
		phase := "warm-up"
		if r.recording.Load() {
			phase = "measuring"
		}
		fmt.Fprintf(w, "%5.1fs %-9s pairs %d (%d/s)  acquire p50 %.2fms p99 %.2fms  hand-off p50 %.2fms  errors %d\n",
			r.now().Seconds(), phase, p, p-last, ms(r.acquire.Quantile(0.5)), ms(r.acquire.Quantile(0.99)),
			ms(r.handoff.Quantile(0.5)), r.errs.Load())
		last = p
	})
}

// everySecond calls line with w once a second, from a goroutine of its
// own, until the returned function is called (which waits for it). A nil
// w prints nothing.
func everySecond(w io.Writer, line func(io.Writer)) (stop func()) {
	if w == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				line(w)
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// OpenSessions opens n sessions, at most par at a time.
func OpenSessions(ctx context.Context, d Driver, n, par int) ([]Session, error) {
	out := make([]Session, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			octx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			s, err := d.Open(octx)
			if err != nil {
				errs <- fmt.Errorf("opening session %d of %d: %w", i+1, n, err)
				return
			}
			out[i] = s
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		var open []Session
		for _, s := range out {
			if s != nil {
				open = append(open, s)
			}
		}
		closeSessions(open)
		return nil, err
	}
	return out, nil
}

func closeSessions(ss []Session) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for _, s := range ss {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = s.Close(ctx)
		}()
	}
	wg.Wait()
}

package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/proccluster"
)

// The watch workload (SPEC §13, issue 26): workers run uncontended
// acquire/release pairs in one namespace, as the uncontended workload
// does, while Watchers watches of the whole namespace follow it. The
// watches share WatchConns clients (a lockcluster.Client each: one
// connection to the node it starts on, and its own session); each watch is
// a stream of its own. Client k starts on endpoint k mod len(Endpoints),
// so with three nodes the followers serve two thirds of the watches, as
// they would serve users'.
//
// Measured over the window: the workers' pairs/s; the watch events (one a
// log entry) and changes received, in all and per watcher (p50, min); the
// lag of every change received: the time this process received it minus
// the leader's time in its entry (WatchEvent.Time, the leader's wall
// clock when it made the entry), both wall clocks, which are one clock
// when the nodes run on this machine (--local); and the nodes' CPU and
// RSS. Over the whole run: every grant and release of the workers is one
// change every watcher must receive; after the workers stop the watchers
// get Drain to catch up, and each one's count of those changes is
// compared with the workers'. A watch that fell behind the nodes' history
// resynchronises from a snapshot (a Resync event): it is counted as cut,
// and a run with a cut watch, a stopped watch, or a watcher that missed a
// change is not valid.

// maxWatchesPerConn: a node lets one connection carry 256 streams (serve
// --max-concurrent-streams); the client's own session stream and its
// calls need a few.
const maxWatchesPerConn = 250

// WatchConfig describes a watch run.
type WatchConfig struct {
	// Run is the workers' part (Workload Watch): Workers, Sessions,
	// Duration, Warmup, Hold, Prefix, MaxOps, Progress; and Watchers and
	// WatchConns.
	Run Config
	// Driver opens the workers' sessions.
	Driver Driver
	// Endpoints and Namespace are the watchers': Namespace is the one the
	// workers lock in.
	Endpoints []string
	Namespace string
	// Drain is how long the watchers get, after the workers stopped, to
	// receive every change they caused (0: 30 s).
	Drain time.Duration
	// Meter, if set, starts measuring the nodes when the window starts;
	// the function it returns, called when the window ends, says what they
	// used.
	Meter func() (stop func() []ProcUsage)
}

// WatchResult is what a watch run measured besides the workers' pairs.
type WatchResult struct {
	Watchers int `json:"watchers"`
	Conns    int `json:"watch_conns"`
	// PerEndpoint is how many watches started on each node.
	PerEndpoint []EndpointWatches `json:"per_endpoint"`
	// StartS is how long starting every watch (its snapshot) took.
	StartS float64 `json:"start_s"`

	// In the window, all watchers together: events (one a log entry that
	// changed the namespace) and their changes.
	Events        int64   `json:"events"`
	EventsPerSec  float64 `json:"events_per_sec"`
	Changes       int64   `json:"changes"`
	ChangesPerSec float64 `json:"changes_per_sec"`
	// Per watcher, in the window: events/s, the median and the slowest.
	WatcherEventsPerSecP50 float64 `json:"watcher_events_per_sec_p50"`
	WatcherEventsPerSecMin float64 `json:"watcher_events_per_sec_min"`
	// Lag is, per change received in the window, the receive time minus
	// the leader's time in its entry (wall clocks). Untimed counts events
	// that carried no time (not in Lag).
	Lag     Latency `json:"lag"`
	Untimed int64   `json:"untimed_events,omitempty"`

	// Over the whole run: the changes the workers caused (a grant and a
	// release a pair), and how many of them each watcher received.
	Caused      int64 `json:"caused"`
	ReceivedMin int64 `json:"received_min"`
	ReceivedMax int64 `json:"received_max"`
	// Complete is how many watchers received exactly every one.
	Complete int `json:"complete"`
	// DrainS is how long the watchers took to catch up after the workers
	// stopped (Drain at most).
	DrainS float64 `json:"drain_s"`
	// Cut counts resynchronisations (COMPACTED: a watch the history left
	// behind); Failed, watches that stopped with an error.
	Cut          int64    `json:"cut"`
	Failed       int      `json:"failed"`
	ErrorSamples []string `json:"error_samples,omitempty"`
	// Valid: no watch cut or failed, and every watcher received every
	// change.
	Valid bool `json:"valid"`
}

// EndpointWatches is how many watches one node served.
type EndpointWatches struct {
	Endpoint string `json:"endpoint"`
	Leader   bool   `json:"leader,omitempty"`
	Watches  int    `json:"watches"`
}

// aWatch is one watcher's state.
type aWatch struct {
	w     *lockcluster.Watcher
	lag   *Histogram // shared with its client's other watches
	ready chan struct{}
	done  chan struct{}
	err   error // why it stopped, once done is closed

	events, changes atomic.Int64 // every one received
	ours            atomic.Int64 // the workers' grants and releases
	cut, untimed    atomic.Int64
	from, to        int64 // events at the window's start and end
	fromCh, toCh    int64 // changes
}

// consume reads w's events until the watch stops.
func (a *aWatch) consume(ctx context.Context, prefix string, rec *atomic.Bool) {
	defer close(a.done)
	started := false
	for {
		ev, err := a.w.Next(ctx)
		if err != nil {
			a.err = err
			return
		}
		now := time.Now()
		if ev.Snapshot != nil {
			if ev.Resync {
				a.cut.Add(1)
			}
			if !started {
				started = true
				close(a.ready)
			}
			continue
		}
		n := int64(len(ev.Changes))
		a.events.Add(1)
		a.changes.Add(n)
		var ours int64
		for _, c := range ev.Changes {
			if (c.Kind == lockcluster.ChangeGranted || c.Kind == lockcluster.ChangeReleased) && len(c.Names) > 0 && strings.HasPrefix(c.Names[0], prefix) {
				ours++
			}
		}
		a.ours.Add(ours)
		if rec.Load() {
			if ev.Time.IsZero() {
				a.untimed.Add(1)
			} else {
				a.lag.RecordN(now.Sub(ev.Time), n)
			}
		}
	}
}

// RunWatch runs the watch workload.
func RunWatch(ctx context.Context, cfg WatchConfig) (*Result, error) {
	rc := cfg.Run
	if rc.Workload == "" {
		rc.Workload = Watch
	}
	if rc.Workload != Watch {
		return nil, fmt.Errorf("RunWatch runs the watch workload, not %q", rc.Workload)
	}
	if err := rc.Validate(); err != nil {
		return nil, err
	}
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("watch: no endpoints")
	}
	if cfg.Drain <= 0 {
		cfg.Drain = 30 * time.Second
	}
	wr := &WatchResult{Watchers: rc.Watchers, Conns: rc.WatchConns}
	leader := proccluster.Leader(ctx, cfg.Endpoints)
	for i, e := range cfg.Endpoints {
		wr.PerEndpoint = append(wr.PerEndpoint, EndpointWatches{Endpoint: e, Leader: i == leader})
	}

	// The clients: client k starts on endpoint k mod len.
	clients := make([]*lockcluster.Client, rc.WatchConns)
	defer func() {
		var wg sync.WaitGroup
		for _, c := range clients {
			if c != nil {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					_ = c.Close(cctx)
				}()
			}
		}
		wg.Wait()
	}()
	lags := make([]*Histogram, rc.WatchConns)
	for k := range clients {
		i := k % len(cfg.Endpoints)
		eps := append(append([]string(nil), cfg.Endpoints[i:]...), cfg.Endpoints[:i]...)
		opts := []lockcluster.Option{lockcluster.WithLabel("bench-watch")}
		if cfg.Namespace != "" {
			opts = append(opts, lockcluster.WithNamespace(cfg.Namespace))
		}
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		c, err := lockcluster.Dial(dctx, eps, opts...)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("watch client %d of %d: %w", k+1, rc.WatchConns, err)
		}
		clients[k], lags[k] = c, new(Histogram)
	}

	// The watches, 64 starting at a time; each is ready once its snapshot
	// came.
	wctx, cancelWatches := context.WithCancel(ctx)
	defer cancelWatches()
	var rec atomic.Bool
	watches := make([]*aWatch, rc.Watchers)
	defer func() {
		for _, a := range watches {
			if a != nil {
				a.w.Close()
				<-a.done
			}
		}
	}()
	t0 := time.Now()
	sem := make(chan struct{}, 64)
	startBy := time.NewTimer(2 * time.Minute)
	defer startBy.Stop()
	for i := range watches {
		k := i % rc.WatchConns
		select {
		case sem <- struct{}{}:
		case <-startBy.C:
			return nil, fmt.Errorf("watch: %d of %d watches started in 2 minutes", i, rc.Watchers)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		w, err := clients[k].Watch(wctx, lockcluster.WatchOptions{})
		if err != nil {
			return nil, fmt.Errorf("watch %d of %d: %w", i+1, rc.Watchers, err)
		}
		a := &aWatch{w: w, lag: lags[k], ready: make(chan struct{}), done: make(chan struct{})}
		watches[i] = a
		wr.PerEndpoint[k%len(cfg.Endpoints)].Watches++
		go a.consume(wctx, rc.Prefix, &rec)
		go func() {
			select {
			case <-a.ready:
			case <-a.done:
			}
			<-sem
		}()
	}
	for i, a := range watches {
		select {
		case <-a.ready:
		case <-a.done:
			return nil, fmt.Errorf("watch %d of %d stopped before its snapshot: %w", i+1, rc.Watchers, a.err)
		case <-startBy.C:
			return nil, fmt.Errorf("watch: watch %d of %d had no snapshot in 2 minutes", i+1, rc.Watchers)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	wr.StartS = round3(time.Since(t0).Seconds())
	if rc.Progress != nil {
		fmt.Fprintf(rc.Progress, "%d watches started in %.1fs over %d connections\n", rc.Watchers, wr.StartS, rc.WatchConns)
	}

	// The workers, and the window.
	var winStart time.Time
	var window float64
	var stopMeter func() []ProcUsage
	var procs []ProcUsage
	hooks := windowHooks{
		start: func() {
			if cfg.Meter != nil {
				stopMeter = cfg.Meter()
			}
			for _, a := range watches {
				a.from, a.fromCh = a.events.Load(), a.changes.Load()
			}
			rec.Store(true)
			winStart = time.Now()
		},
		end: func() {
			rec.Store(false)
			window = time.Since(winStart).Seconds()
			for _, a := range watches {
				a.to, a.toCh = a.events.Load(), a.changes.Load()
			}
			if stopMeter != nil {
				procs = stopMeter()
			}
		},
	}
	stopProgress := watchProgress(rc.Progress, watches, lags)
	res, r, err := runLocks(ctx, cfg.Driver, rc, hooks)
	stopProgress()
	if err != nil {
		return nil, err
	}
	res.Processes = procs

	// Every watcher catches up on what the workers caused.
	wr.Caused = r.grants.Load() + r.releases.Load()
	t1 := time.Now()
	drainBy := time.NewTimer(cfg.Drain)
	tick := time.NewTicker(20 * time.Millisecond)
	for behind := true; behind; {
		behind = false
		for _, a := range watches {
			select {
			case <-a.done:
				continue // stopped: it will not catch up
			default:
			}
			behind = behind || a.ours.Load() < wr.Caused
		}
		if !behind {
			break
		}
		select {
		case <-tick.C:
		case <-drainBy.C:
			behind = false
		case <-ctx.Done():
			behind = false
		}
	}
	tick.Stop()
	drainBy.Stop()
	wr.DrainS = round3(time.Since(t1).Seconds())

	// A watch that stopped before it was closed failed.
	for i, a := range watches {
		select {
		case <-a.done:
			wr.Failed++
			if len(wr.ErrorSamples) < 5 {
				wr.ErrorSamples = append(wr.ErrorSamples, sample(fmt.Errorf("watch %d: %w", i+1, a.err)))
			}
		default:
		}
	}

	all := new(Histogram)
	for _, h := range lags {
		all.Merge(h)
	}
	wr.Lag = all.Summary()
	rates := make([]float64, 0, len(watches))
	wr.ReceivedMin = wr.Caused + 1
	for _, a := range watches {
		wr.Events += a.to - a.from
		wr.Changes += a.toCh - a.fromCh
		rates = append(rates, ratef(a.to-a.from, window))
		got := a.ours.Load()
		wr.ReceivedMin, wr.ReceivedMax = min(wr.ReceivedMin, got), max(wr.ReceivedMax, got)
		if got == wr.Caused {
			wr.Complete++
		}
		wr.Cut += a.cut.Load()
		wr.Untimed += a.untimed.Load()
	}
	slices.Sort(rates)
	wr.WatcherEventsPerSecMin, wr.WatcherEventsPerSecP50 = rates[0], rates[(len(rates)-1)/2]
	wr.EventsPerSec, wr.ChangesPerSec = rate(wr.Events, window), rate(wr.Changes, window)
	wr.Valid = wr.Cut == 0 && wr.Failed == 0 && wr.Complete == len(watches)
	res.Watch = wr
	return res, nil
}

// ratef is n per second of seconds, unrounded below 0.1.
func ratef(n int64, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return float64(n) / seconds
}

func round3(f float64) float64 { return float64(int64(f*1000)) / 1000 }

// watchProgress prints a line a second about the watches.
func watchProgress(w io.Writer, watches []*aWatch, lags []*Histogram) func() {
	var last int64
	return everySecond(w, func(w io.Writer) {
		var ev, cut int64
		stopped := 0
		for _, a := range watches {
			ev += a.events.Load()
			cut += a.cut.Load()
			select {
			case <-a.done:
				stopped++
			default:
			}
		}
		all := new(Histogram)
		for _, h := range lags {
			all.Merge(h)
		}
		fmt.Fprintf(w, "       watch events %d (%d/s, %.0f/s a watcher)  lag p50 %.2fms p99 %.2fms  cut %d  stopped %d\n",
			ev, ev-last, float64(ev-last)/float64(len(watches)), ms(all.Quantile(0.5)), ms(all.Quantile(0.99)), cut, stopped)
		last = ev
	})
}

func (r *WatchResult) write(w io.Writer) {
	fmt.Fprintf(w, "watches\t%d\t(%d connections, started in %.1fs)\n", r.Watchers, r.Conns, r.StartS)
	for _, e := range r.PerEndpoint {
		role := "follower"
		if e.Leader {
			role = "leader"
		}
		fmt.Fprintf(w, "  on %s (%s)\t%d\n", e.Endpoint, role, e.Watches)
	}
	fmt.Fprintf(w, "watch events, all watchers\t%d\t%.1f/s\n", r.Events, r.EventsPerSec)
	fmt.Fprintf(w, "watch changes, all watchers\t%d\t%.1f/s\n", r.Changes, r.ChangesPerSec)
	fmt.Fprintf(w, "watch events/s a watcher\tp50 %.1f\tmin %.1f\n", r.WatcherEventsPerSecP50, r.WatcherEventsPerSecMin)
	l := r.Lag
	fmt.Fprintln(w, "watch lag (ms)\tcount\tp50\tp90\tp99\tp99.9\tmax")
	fmt.Fprintf(w, "  entry time → received\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\n", l.Count, l.P50MS, l.P90MS, l.P99MS, l.P999MS, l.MaxMS)
	if r.Untimed > 0 {
		fmt.Fprintf(w, "  events without a time\t%d\n", r.Untimed)
	}
	fmt.Fprintf(w, "changes the workers caused\t%d\n", r.Caused)
	fmt.Fprintf(w, "  received by a watcher\tmin %d\tmax %d\n", r.ReceivedMin, r.ReceivedMax)
	fmt.Fprintf(w, "  watchers that got all\t%d\tof %d\t(drained in %.1fs)\n", r.Complete, r.Watchers, r.DrainS)
	fmt.Fprintf(w, "watches cut (resync)\t%d\n", r.Cut)
	fmt.Fprintf(w, "watches failed\t%d\n", r.Failed)
	for _, e := range r.ErrorSamples {
		fmt.Fprintf(w, "  e.g.\t%s\n", e)
	}
	if !r.Valid {
		fmt.Fprintln(w, "NOT A VALID RUN: a watch was cut or failed, or a watcher missed a change")
	}
}

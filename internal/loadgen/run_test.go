package loadgen

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// memDriver is an in-process lock service: one token per name. Shared
// requests are treated as exclusive.
type memDriver struct {
	mu    sync.Mutex
	locks map[string]chan struct{}
	delay time.Duration // added to every acquire, like a commit
}

func (d *memDriver) Name() string { return "mem" }
func (d *memDriver) Close() error { return nil }
func (d *memDriver) Open(ctx context.Context) (Session, error) {
	return memSession{d}, nil
}

type memSession struct{ d *memDriver }

func (s memSession) Close(context.Context) error { return nil }
func (s memSession) Lock(ctx context.Context, name string, shared, ifAvailable bool) (Held, error) {
	s.d.mu.Lock()
	if s.d.locks == nil {
		s.d.locks = map[string]chan struct{}{}
	}
	ch := s.d.locks[name]
	if ch == nil {
		ch = make(chan struct{}, 1)
		s.d.locks[name] = ch
	}
	s.d.mu.Unlock()
	time.Sleep(s.d.delay)
	if ifAvailable {
		select {
		case ch <- struct{}{}:
		default:
			return nil, ErrNotAvailable
		}
	} else {
		select {
		case ch <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return releaser(func(context.Context) error { <-ch; return nil }), nil
}

type releaser func(context.Context) error

func (r releaser) Release(ctx context.Context) error { return r(ctx) }

func runMem(t *testing.T, workload string, workers int) *Result {
	t.Helper()
	cfg := Config{Workload: workload, Workers: workers, Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond, Hold: 100 * time.Microsecond, Baseline: 10}
	r, err := Run(context.Background(), &memDriver{delay: 50 * time.Microsecond}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Errors != 0 || r.Pairs == 0 || r.DurationS < 0.3 || r.DurationS > 1 {
		t.Fatalf("%s: %+v", workload, r)
	}
	if r.Acquire.Count < r.Pairs || r.Release.Count != r.Pairs {
		t.Errorf("%s: %d acquires and %d releases recorded for %d pairs", workload, r.Acquire.Count, r.Release.Count, r.Pairs)
	}
	return r
}

func TestUncontendedHasNoHandoffs(t *testing.T) {
	r := runMem(t, Uncontended, 4)
	if r.Handoffs != 0 {
		t.Errorf("%d hand-offs among workers with names of their own", r.Handoffs)
	}
	if r.Sessions != 4 {
		t.Errorf("sessions %d, want one per worker", r.Sessions)
	}
}

func TestContendedCountsHandoffs(t *testing.T) {
	r := runMem(t, Contended, 4)
	if r.Handoffs == 0 || r.Handoffs > r.Pairs+int64(r.Workers) {
		t.Fatalf("%d hand-offs for %d pairs", r.Handoffs, r.Pairs)
	}
	// Every hand-off is shorter than the whole acquire it ends.
	if r.Handoff.P50MS > r.Acquire.P50MS || r.Handoff.Count != r.Handoffs {
		t.Errorf("hand-off %+v, acquire %+v", r.Handoff, r.Acquire)
	}
	if r.CommitP50MS <= 0 {
		t.Error("no baseline commit latency")
	}
}

func TestIfAvailableCountsAttempts(t *testing.T) {
	r := runMem(t, IfAvailable, 8)
	// An attempt at the end of the window may have its release after it.
	if d := r.Attempts - r.Pairs - r.NotAvailable; d < 0 || d > int64(r.Workers) || r.NotAvailable == 0 {
		t.Errorf("attempts %d, pairs %d, not available %d", r.Attempts, r.Pairs, r.NotAvailable)
	}
}

func TestChurnOpensSessions(t *testing.T) {
	r := runMem(t, Churn, 2)
	// A pair at the start of the window may have opened its session before.
	if d := r.Pairs - r.SessionsOpened; d < 0 || d > int64(r.Workers) || r.Open == nil || r.Open.Count < r.SessionsOpened {
		t.Errorf("sessions opened %d, pairs %d, open %+v", r.SessionsOpened, r.Pairs, r.Open)
	}
}

func TestRunStopsAtMaxOps(t *testing.T) {
	// The window is a minute; the test's deadline, half that, only stops
	// a run that hangs. Stopping before either shows MaxOps ended it.
	cfg := Config{Workload: Uncontended, Workers: 2, Duration: time.Minute, MaxOps: 50}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := Run(ctx, &memDriver{}, cfg)
	if err != nil || ctx.Err() != nil {
		t.Fatalf("the run did not stop at MaxOps before the test's deadline: %v", err)
	}
	if r.Pairs < 50 || r.DurationS >= cfg.Duration.Seconds() {
		t.Errorf("stopped with %d pairs after a window of %.3fs, want >= 50 pairs before the %s window ended", r.Pairs, r.DurationS, cfg.Duration)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []Config{
		{Workload: "nope", Workers: 1, Duration: time.Second},
		{Workload: Uncontended, Workers: 0, Duration: time.Second},
		{Workload: Uncontended, Workers: 1025, Duration: time.Second},
		{Workload: Uncontended, Workers: 1, Duration: 0},
		{Workload: RW, Workers: 1, Duration: time.Second, WriteRatio: 2},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	c := Config{Workload: Idle, Workers: 1, Duration: time.Second}
	if err := c.Validate(); err != nil || c.Sessions != 1000 || c.MaxOps <= 0 || !strings.HasPrefix(c.Prefix, "bench-") {
		t.Errorf("defaults: %+v, %v", c, err)
	}
	if _, err := Run(context.Background(), &memDriver{}, Config{Workload: Idle, Workers: 1, Duration: time.Second}); err == nil {
		t.Error("Run accepted the idle workload")
	}
	if errors.Is(nil, ErrNotAvailable) {
		t.Fatal("unreachable")
	}
}

func TestProcReadsThisProcess(t *testing.T) {
	m := StartCPU([]string{"me"}, []int{0})
	for i := 0; i < 3e7; i++ {
		_ = i * i
	}
	u := m.Stop()
	if len(u) != 1 || u[0].RSSMiB <= 0 || u[0].AnonMiB <= 0 || u[0].FileMiB <= 0 || u[0].AnonMiB+u[0].FileMiB > u[0].RSSMiB+1 {
		t.Fatalf("%+v", u)
	}
	if _, err := CPUTime(u[0].PID); err != nil {
		t.Fatal(err)
	}
}

func TestValidateWatch(t *testing.T) {
	c := Config{Workload: Watch, Workers: 8, Duration: time.Second}
	if err := c.Validate(); err != nil || c.Watchers != 1000 || c.WatchConns != 16 || c.Sessions != 8 {
		t.Errorf("defaults: %+v, %v", c, err)
	}
	c = Config{Workload: Watch, Workers: 1, Duration: time.Second, Watchers: 3}
	if err := c.Validate(); err != nil || c.WatchConns != 3 {
		t.Errorf("fewer watchers than connections: %+v, %v", c, err)
	}
	c = Config{Workload: Watch, Workers: 1, Duration: time.Second, Watchers: 1000, WatchConns: 2}
	if err := c.Validate(); err == nil {
		t.Error("500 watches on one connection accepted")
	}
	if _, err := Run(context.Background(), &memDriver{}, Config{Workload: Watch, Workers: 1, Duration: time.Second}); err == nil {
		t.Error("Run accepted the watch workload")
	}
}

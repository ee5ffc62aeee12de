package loadgen

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/proccluster"
)

// FailoverConfig configures RunFailover.
type FailoverConfig struct {
	Cluster *proccluster.Cluster
	Workers int // sessions running uncontended pairs all along
	Probes  int // sessions that request a fresh lock right after each kill (0: 4)
	Trials  int
	Gap     time.Duration
	TTL     time.Duration // sessions' TTL (0: 10s)
	// Gap is how long to wait, once the restarted node has caught up,
	// before the next kill (0: 1s).
	Prefix   string
	Progress io.Writer

	// Sessions, if above 0, runs the failover with that many sessions
	// speaking the protocol directly, each holding a lock, instead of
	// Workers running pairs (failsess.go): Workers is then not used.
	Sessions int
	// ConnsPerNode: the connections per node that carry the sessions'
	// streams (0: 8).
	ConnsPerNode int
	// ReattachMin and ReattachMax: the window of a session's jittered wait
	// before each attach after its stream failed (0: 50 ms and 250 ms).
	ReattachMin, ReattachMax time.Duration
	// StableFor: how long a leader must keep its term for the cluster to
	// count as stable after a kill (0: 5 s); TrialMax bounds the wait for
	// that after each kill (0: 2 minutes).
	StableFor, TrialMax time.Duration
	// RestartAfter: how long after the first grant that follows a kill the
	// killed node is started again (0: at once, as without Sessions).
	RestartAfter time.Duration
}

// FailoverTrial is one leader kill.
type FailoverTrial struct {
	Killed string `json:"killed"`
	// ElectedMS: from the kill until a surviving node reports itself leader.
	ElectedMS float64 `json:"elected_ms"`
	// FirstGrantMS: from the kill until the first grant of a request made
	// after the kill (the earliest of the probes).
	FirstGrantMS float64 `json:"first_grant_ms"`
	// Sessions: what a kill with many sessions measured (Sessions > 0).
	Sessions *SessionTrial `json:"sessions,omitempty"`
}

// FailoverResult is what RunFailover measured.
type FailoverResult struct {
	Trials          []FailoverTrial `json:"trials"`
	FirstGrantP50MS float64         `json:"first_grant_p50_ms"`
	FirstGrantMaxMS float64         `json:"first_grant_max_ms"`
	ElectedP50MS    float64         `json:"elected_p50_ms"`
	// SessionsLost counts sessions (workers, probes, the holder) the
	// cluster ended; HolderLost says whether a lock held all along was lost.
	SessionsLost int64  `json:"sessions_lost"`
	HolderLost   bool   `json:"holder_lost"`
	HolderCause  string `json:"holder_cause,omitempty"` // why the held lock ended
	WorkerPairs  int64  `json:"worker_pairs"`
	WorkerErrors int64  `json:"worker_errors"`
	// Sessions: the whole run's, with many sessions (Sessions > 0).
	Sessions *FailoverSessions `json:"sessions,omitempty"`
}

func (r *FailoverResult) write(w io.Writer) {
	if r.Sessions != nil {
		r.writeSessions(w)
		return
	}
	fmt.Fprintln(w, "trial\tkilled\telected (ms)\tfirst grant (ms)")
	for i, t := range r.Trials {
		fmt.Fprintf(w, "  %d\t%s\t%.0f\t%.0f\n", i+1, t.Killed, t.ElectedMS, t.FirstGrantMS)
	}
	fmt.Fprintf(w, "first grant after kill\tp50 %.0f ms\tmax %.0f ms\telected p50 %.0f ms\n", r.FirstGrantP50MS, r.FirstGrantMaxMS, r.ElectedP50MS)
	fmt.Fprintf(w, "sessions lost\t%d\tlock held throughout lost: %v %s\tworker pairs %d, errors %d\n", r.SessionsLost, r.HolderLost, r.HolderCause, r.WorkerPairs, r.WorkerErrors)
}

// RunFailover kills the leader cfg.Trials times under load, restarting it
// (and waiting for it to catch up) between trials.
func RunFailover(ctx context.Context, cfg FailoverConfig) (*FailoverResult, error) {
	if cfg.Probes <= 0 {
		cfg.Probes = 4
	}
	if cfg.Gap <= 0 {
		cfg.Gap = time.Second
	}
	if cfg.Sessions > 0 {
		return runFailoverSessions(ctx, cfg)
	}
	c := cfg.Cluster
	d := &Lockcluster{Endpoints: c.Addrs(), TTL: cfg.TTL, Rotate: true}
	all, err := OpenSessions(ctx, d, cfg.Workers+cfg.Probes+1, 16)
	if err != nil {
		return nil, err
	}
	defer closeSessions(all)
	workers, probes, holder := all[:cfg.Workers], all[cfg.Workers:cfg.Workers+cfg.Probes], all[len(all)-1]
	held, err := holder.Lock(ctx, cfg.Prefix+"held", false, false)
	if err != nil {
		return nil, err
	}
	res := &FailoverResult{}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var pairs, errs atomic.Int64
	for i, s := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("%sw/%d", cfg.Prefix, i)
			for wctx.Err() == nil {
				l, err := s.Lock(wctx, name, false, false)
				if err == nil {
					err = l.Release(context.WithoutCancel(wctx))
				}
				if err != nil {
					if wctx.Err() == nil {
						errs.Add(1)
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				pairs.Add(1)
			}
		}()
	}
	var electedAll, grantAll []time.Duration
	for t := range cfg.Trials {
		if err := c.CaughtUp(ctx, 60*time.Second); err != nil {
			stop()
			wg.Wait()
			return nil, err
		}
		sleepCtx(ctx, cfg.Gap)
		leader, err := c.Leader(ctx, 10*time.Second)
		if err != nil {
			stop()
			wg.Wait()
			return nil, err
		}
		elected, first := killOnce(ctx, c, leader, probes, fmt.Sprintf("%sprobe/%d/", cfg.Prefix, t))
		res.Trials = append(res.Trials, FailoverTrial{Killed: c.Nodes[leader].ID, ElectedMS: ms(elected), FirstGrantMS: ms(first)})
		electedAll, grantAll = append(electedAll, elected), append(grantAll, first)
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "trial %d/%d: killed %s; a new leader in %s, first grant %s after the kill\n",
				t+1, cfg.Trials, c.Nodes[leader].ID, elected.Round(time.Millisecond), first.Round(time.Millisecond))
		}
		if err := c.Start(leader); err != nil {
			stop()
			wg.Wait()
			return nil, err
		}
	}
	stop()
	wg.Wait()
	res.WorkerPairs, res.WorkerErrors = pairs.Load(), errs.Load()
	res.FirstGrantP50MS, res.ElectedP50MS = ms(median(grantAll)), ms(median(electedAll))
	res.FirstGrantMaxMS = ms(slices.Max(grantAll))
	if l, ok := held.(lcHeld); ok && l.l.Err() != nil {
		res.HolderLost, res.HolderCause = true, l.l.Err().Error()
	}
	for _, s := range all {
		if e, ok := s.(Expirer); ok && e.Lost() {
			res.SessionsLost++
		}
	}
	return res, nil
}

// killOnce kills node leader and returns how long until a survivor
// reported itself leader, and until the first probe's fresh request was
// granted.
func killOnce(ctx context.Context, c *proccluster.Cluster, leader int, probes []Session, prefix string) (elected, first time.Duration) {
	var survivors []string
	for i, nd := range c.Nodes {
		if i != leader {
			survivors = append(survivors, nd.GRPC)
		}
	}
	admin, err := lockcluster.DialAdmin(survivors)
	if err != nil {
		return 0, 0
	}
	defer admin.Close()
	killed := time.Now()
	_ = c.Kill(leader) // it runs: Leader found it leading
	var wg sync.WaitGroup
	grants := make([]time.Duration, len(probes))
	for i, p := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			l, err := p.Lock(pctx, fmt.Sprintf("%s%d", prefix, i), false, false)
			grants[i] = time.Since(killed)
			if err != nil {
				grants[i] = 20 * time.Second
				return
			}
			_ = l.Release(pctx)
		}()
	}
	for elected == 0 && time.Since(killed) < 20*time.Second {
		sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		for _, st := range admin.Status(sctx) {
			if st.State == "Leader" {
				elected = time.Since(killed)
			}
		}
		cancel()
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	return elected, slices.Min(grants)
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

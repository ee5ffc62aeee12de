package loadgen

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/proccluster"
)

// Flood is the hostile-tenant workload (security issue): one namespace
// floods the cluster with OpenSession calls far over its sessions limit
// while a bystander namespace locks and unlocks. It measures the
// bystander's latency quiet and under the flood, and how many log entries
// the flood added: refusals must be answered before the log.
const Flood = "flood"

// FloodConfig describes a flood run.
type FloodConfig struct {
	Driver    Driver   // the bystander's sessions (its namespace)
	Endpoints []string // the flood's targets, leader first
	// FloodNamespace is the flooding tenant's namespace; its sessions limit
	// (serve --limit-sessions-per-namespace) should be far below Opens.
	FloodNamespace string
	Opens          int           // OpenSession calls the flood makes
	FloodWorkers   int           // concurrent flood callers
	Workers        int           // bystander workers, each a name of its own
	Duration       time.Duration // the quiet window (the flood lasts as long as it takes)
	Prefix         string
	// LogIndex reads the leader's last log index (nil: not measured).
	LogIndex func(context.Context) (uint64, error)
	Progress io.Writer
}

// FloodResult is what a flood run measured.
type FloodResult struct {
	Quiet, Flooded          Latency // the bystander's acquire latency
	QuietPairs, FloodPairs  int64
	P99Ratio                float64 // flooded p99 / quiet p99
	Opens, Opened, Refused  int64   // flood calls, sessions it opened, refused (ResourceExhausted)
	OtherErrors             int64
	FloodSeconds            float64
	LogEntriesDuringFlood   int64 // leader's log growth while the flood ran (-1: not measured)
	BystanderWritesInFlood  int64 // of those, the bystander's (two per pair)
	FloodEntriesBeyondOpens int64 // entries neither the bystander's nor an opened session's
}

// RunFlood runs the quiet window, then the flood with the bystander still
// running.
func RunFlood(ctx context.Context, c FloodConfig) (*FloodResult, error) {
	if c.Opens <= 0 || c.FloodWorkers <= 0 || c.Workers <= 0 || len(c.Endpoints) == 0 {
		return nil, fmt.Errorf("flood: opens %d, flood workers %d, workers %d, endpoints %v: all required", c.Opens, c.FloodWorkers, c.Workers, c.Endpoints)
	}
	res := &FloodResult{LogEntriesDuringFlood: -1}
	by := &bystander{}
	bctx, stopBystander := context.WithCancel(ctx)
	defer stopBystander()
	var bwg sync.WaitGroup
	for w := range c.Workers {
		s, err := c.Driver.Open(ctx)
		if err != nil {
			return nil, fmt.Errorf("flood: bystander session: %w", err)
		}
		defer s.Close(context.Background())
		bwg.Add(1)
		go func() { defer bwg.Done(); by.run(bctx, s, fmt.Sprintf("%sbystander-%d", c.Prefix, w)) }()
	}
	progress(c.Progress, "flood: quiet window of %s", c.Duration)
	sleepCtx(ctx, c.Duration)
	quiet, quietPairs := by.swap()
	res.Quiet, res.QuietPairs = quiet.Summary(), quietPairs

	conns := make([]*grpc.ClientConn, 0, len(c.Endpoints))
	for _, a := range c.Endpoints[:1] { // the leader: refusals there cost no forwarding
		cc, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		defer cc.Close()
		conns = append(conns, cc)
	}
	var before uint64
	if c.LogIndex != nil {
		before, _ = c.LogIndex(ctx)
	}
	start := time.Now()
	var next atomic.Int64
	var fwg sync.WaitGroup
	for range c.FloodWorkers {
		fwg.Add(1)
		go func() {
			defer fwg.Done()
			lc := pb.NewLocksClient(conns[0])
			for next.Add(1) <= int64(c.Opens) && ctx.Err() == nil {
				_, err := lc.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: c.FloodNamespace, Label: "flood", Ttl: durationpb.New(time.Hour)})
				switch status.Code(err) {
				case codes.OK:
					atomic.AddInt64(&res.Opened, 1)
				case codes.ResourceExhausted:
					atomic.AddInt64(&res.Refused, 1)
				default:
					atomic.AddInt64(&res.OtherErrors, 1)
				}
			}
		}()
	}
	stopProgress := everySecond(c.Progress, func(w io.Writer) {
		fmt.Fprintf(w, "flood: %d calls, %d opened, %d refused\n", min(next.Load(), int64(c.Opens)), atomic.LoadInt64(&res.Opened), atomic.LoadInt64(&res.Refused))
	})
	fwg.Wait()
	stopProgress()
	res.FloodSeconds = time.Since(start).Seconds()
	flooded, floodPairs := by.swap()
	res.Flooded, res.FloodPairs = flooded.Summary(), floodPairs
	if c.LogIndex != nil {
		if after, err := c.LogIndex(ctx); err == nil && before > 0 {
			res.LogEntriesDuringFlood = int64(after - before)
			res.BystanderWritesInFlood = 2 * floodPairs
			res.FloodEntriesBeyondOpens = res.LogEntriesDuringFlood - res.BystanderWritesInFlood - res.Opened
		}
	}
	stopBystander()
	bwg.Wait()
	res.Opens = min(next.Load(), int64(c.Opens))
	if q := res.Quiet.P99MS; q > 0 {
		res.P99Ratio = res.Flooded.P99MS / q
	}
	return res, ctx.Err()
}

func (r *FloodResult) write(w io.Writer) {
	fmt.Fprintf(w, "flood	%d OpenSession calls in %.1fs	opened %d	refused %d	other errors %d\n", r.Opens, r.FloodSeconds, r.Opened, r.Refused, r.OtherErrors)
	if r.LogEntriesDuringFlood >= 0 {
		fmt.Fprintf(w, "log entries during the flood	%d	(bystander %d, opened sessions %d, other %d: checkpoints and no-ops)\n",
			r.LogEntriesDuringFlood, r.BystanderWritesInFlood, r.Opened, r.FloodEntriesBeyondOpens)
	}
	fmt.Fprintln(w, "bystander acquire (ms)	pairs	p50	p99	p99.9	max")
	for _, x := range []struct {
		name  string
		l     Latency
		pairs int64
	}{{"  quiet", r.Quiet, r.QuietPairs}, {"  flooded", r.Flooded, r.FloodPairs}} {
		fmt.Fprintf(w, "%s	%d	%.3f	%.3f	%.3f	%.3f\n", x.name, x.pairs, x.l.P50MS, x.l.P99MS, x.l.P999MS, x.l.MaxMS)
	}
	fmt.Fprintf(w, "bystander p99 flooded / quiet	%.2f\n", r.P99Ratio)
}

// bystander runs lock/unlock pairs and records the acquire latency, in a
// histogram that swap hands over and replaces.
type bystander struct {
	mu    sync.Mutex
	hist  *Histogram
	pairs int64
}

func (b *bystander) record(d time.Duration) {
	b.mu.Lock()
	if b.hist == nil {
		b.hist = &Histogram{}
	}
	b.hist.Record(d)
	b.pairs++
	b.mu.Unlock()
}

func (b *bystander) swap() (*Histogram, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h, n := b.hist, b.pairs
	if h == nil {
		h = &Histogram{}
	}
	b.hist, b.pairs = &Histogram{}, 0
	return h, n
}

func (b *bystander) run(ctx context.Context, s Session, name string) {
	for ctx.Err() == nil {
		t0 := time.Now()
		h, err := s.Lock(ctx, name, false, false)
		if err != nil {
			continue
		}
		b.record(time.Since(t0))
		_ = h.Release(ctx)
	}
}

func progress(w io.Writer, format string, a ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", a...)
	}
}

// DigestIndex reads a node's last applied log index from its
// /debug/digest (with an admin token when auth is on).
func DigestIndex(ctx context.Context, httpAddr, token string) (uint64, error) {
	d, err := proccluster.ReadDigest(ctx, httpAddr, 0, token)
	return d.LastIndex, err
}

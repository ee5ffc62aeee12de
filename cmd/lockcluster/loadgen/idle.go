package loadgen

import (
	"context"
	"errors"
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
)

// The idle workload speaks the lockcluster.v1 protocol directly: the Go
// client gives every session its own connection, and 100,000 connections
// do not fit one process. Here sessions share a few connections per node
// (HTTP/2 streams), which is what a node sees from many clients anyway:
// one session stream each, a heartbeat every TTL/3.

// IdleConfig configures RunIdle.
type IdleConfig struct {
	Endpoints    []string
	Namespace    string
	Sessions     int
	TTL          time.Duration // 0: 10s, the default
	Duration     time.Duration // the measured window
	ConnsPerNode int           // 0: 8
	// PIDs are the nodes' process ids, by endpoint, for CPU and RSS (nil:
	// not measured). LeaderPID tells which one leads now.
	PIDs      []int
	LeaderPID func() int
	Progress  io.Writer
}

// IdleResult is what RunIdle measured.
type IdleResult struct {
	Sessions      int     `json:"sessions"`
	TTLMS         float64 `json:"ttl_ms"`
	OpenS         float64 `json:"open_s"`     // opening and attaching them all
	Heartbeats    int64   `json:"heartbeats"` // sent in the window
	Acks          int64   `json:"acks"`       // received in the window
	HeartbeatsSec float64 `json:"heartbeats_per_sec"`
	AckLatency    Latency `json:"ack_latency"`
	// Expired counts sessions the cluster ended while they heartbeat.
	Expired int64 `json:"expired"`
	// Jeopardy counts sessions that went a whole TTL without an
	// acknowledged heartbeat (the Go client would give their locks up).
	Jeopardy     int64       `json:"jeopardy"`
	StreamErrors int64       `json:"stream_errors"`
	OpenRetries  int64       `json:"open_retries"` // opens retried because no leader answered
	LeaderCores  float64     `json:"leader_cpu_cores,omitempty"`
	Processes    []ProcUsage `json:"processes,omitempty"`
}

func (r *IdleResult) write(w io.Writer) {
	fmt.Fprintf(w, "idle sessions\t%d\tTTL %gms\topened+attached in %.1fs\n", r.Sessions, r.TTLMS, r.OpenS)
	fmt.Fprintf(w, "heartbeats\t%d\t%.0f/s\tacks %d\n", r.Heartbeats, r.HeartbeatsSec, r.Acks)
	fmt.Fprintf(w, "heartbeat ack (ms)\tp50 %.3f\tp99 %.3f\tmax %.3f\n", r.AckLatency.P50MS, r.AckLatency.P99MS, r.AckLatency.MaxMS)
	fmt.Fprintf(w, "expired\t%d\tjeopardy %d\tstream errors %d\topen retries %d\n", r.Expired, r.Jeopardy, r.StreamErrors, r.OpenRetries)
	if r.LeaderCores > 0 {
		fmt.Fprintf(w, "leader CPU\t%.2f cores\n", r.LeaderCores)
	}
	for _, p := range r.Processes {
		fmt.Fprintf(w, "  %s\tpid %d\t%.2f cores\tRSS %.0f MiB\n", p.Name, p.PID, p.Cores, p.RSSMiB)
	}
}

type idleSession struct {
	id      uint64
	secret  []byte
	cc      *grpc.ClientConn
	index   uint64
	stream  atomic.Pointer[sessionStream] // nil: the sender reattaches
	sentAt  [4]atomic.Int64               // by heartbeat id mod 4, ns since start
	nextID  uint64                        // owned by the sender
	due     time.Duration                 // owned by the sender
	acked   atomic.Int64                  // send time of the newest acknowledged heartbeat
	ended   atomic.Bool
	jeopard atomic.Bool
	// attaching is set while a goroutine attaches the stream again.
	attaching atomic.Bool
}

// sessionStream boxes a stream for an atomic pointer.
type sessionStream struct{ pb.Locks_SessionClient }

type idleRun struct {
	cfg        IdleConfig
	shards     [16]shard
	start      time.Time
	recording  atomic.Bool
	hbs, acks  atomic.Int64
	expired    atomic.Int64
	jeopardy   atomic.Int64
	streamErrs atomic.Int64
	retries    atomic.Int64 // opens and attaches retried (no leader)
	attachSem  chan struct{}
	ackLat     Histogram
}

func (r *idleRun) now() time.Duration { return time.Since(r.start) }

// RunIdle opens cfg.Sessions sessions, keeps them alive for cfg.Duration
// with heartbeats only, and reports the heartbeat cost and any expiry.
func RunIdle(ctx context.Context, cfg IdleConfig) (*IdleResult, error) {
	if cfg.TTL == 0 {
		cfg.TTL = 10 * time.Second
	}
	if cfg.ConnsPerNode <= 0 {
		cfg.ConnsPerNode = 8
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	r := &idleRun{cfg: cfg, start: time.Now(), attachSem: make(chan struct{}, reattachers)}
	var conns []*grpc.ClientConn
	for range cfg.ConnsPerNode {
		for _, ep := range cfg.Endpoints {
			cc, err := grpc.NewClient(ep, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return nil, err
			}
			defer cc.Close()
			conns = append(conns, cc)
		}
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	// The senders run from the start: a session heartbeats as soon as it
	// is attached, while the others are still being opened.
	var wg sync.WaitGroup
	for i := range r.shards {
		wg.Add(1)
		go func() { defer wg.Done(); r.send(sctx, &r.shards[i]) }()
	}
	ss := make([]*idleSession, cfg.Sessions)
	err := r.openAll(sctx, ss, conns)
	if err != nil {
		stop()
		wg.Wait()
		return nil, err
	}
	res := &IdleResult{Sessions: cfg.Sessions, TTLMS: ms(cfg.TTL), OpenS: float64(int64(r.now().Seconds()*10)) / 10}
	sleepCtx(ctx, cfg.TTL/3+time.Second) // every session heartbeats once more before the window
	var meter *CPUMeter
	var leader int
	if cfg.PIDs != nil {
		names := make([]string, len(cfg.PIDs))
		for i := range names {
			names[i] = fmt.Sprintf("node %s", cfg.Endpoints[i])
		}
		if cfg.LeaderPID != nil {
			leader = cfg.LeaderPID()
		}
		meter = StartCPU(append(names, "bench (this process)"), append(append([]int(nil), cfg.PIDs...), 0))
	}
	r.recording.Store(true)
	from := r.now()
	stopProgress := r.progress()
	sleepCtx(ctx, cfg.Duration)
	r.recording.Store(false)
	end := r.now()
	for _, s := range ss {
		if !s.ended.Load() {
			r.checkJeopardy(s, end)
		}
	}
	window := (r.now() - from).Seconds()
	stopProgress()
	if meter != nil {
		res.Processes = meter.Stop()
		for i, p := range res.Processes {
			if p.PID == leader && leader != 0 {
				res.LeaderCores = p.Cores
				res.Processes[i].Name += " (leader)"
			}
		}
	}
	stop()
	wg.Wait()
	res.Heartbeats, res.Acks = r.hbs.Load(), r.acks.Load()
	res.HeartbeatsSec = rate(res.Heartbeats, window)
	res.AckLatency = r.ackLat.Summary()
	res.Expired, res.Jeopardy, res.StreamErrors = r.expired.Load(), r.jeopardy.Load(), r.streamErrs.Load()
	res.OpenRetries = r.retries.Load()
	r.closeAll(ss)
	return res, nil
}

// openAll opens and attaches every session, 256 at a time.
func (r *idleRun) openAll(ctx context.Context, ss []*idleSession, conns []*grpc.ClientConn) error {
	sem := make(chan struct{}, 256)
	var wg sync.WaitGroup
	var first atomic.Pointer[error]
	var done atomic.Int64
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	go func() {
		for range tick.C {
			if r.cfg.Progress != nil && done.Load() < int64(len(ss)) {
				fmt.Fprintf(r.cfg.Progress, "%5.1fs opening sessions: %d of %d\n", r.now().Seconds(), done.Load(), len(ss))
			}
		}
	}()
	for i := range ss {
		if first.Load() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s := &idleSession{cc: conns[i%len(conns)]}
			if err := r.open(ctx, s); err != nil {
				err = fmt.Errorf("session %d of %d: %w", i+1, len(ss), err)
				first.CompareAndSwap(nil, &err)
				return
			}
			ss[i] = s
			sh := &r.shards[i%len(r.shards)]
			s.due = r.now()
			sh.add(s)
			done.Add(1)
		}()
	}
	wg.Wait()
	if e := first.Load(); e != nil {
		return *e
	}
	return nil
}

// open opens and attaches one session, retrying while the cluster is
// unavailable (an election) for up to a minute. A retried open whose first
// attempt did commit leaves a session nobody heartbeats: it expires. Only
// a failed open is an error: a session that could not be attached is left
// to the sender, which attaches it again, and one that ended before it
// was attached counts as expired.
func (r *idleRun) open(ctx context.Context, s *idleSession) error {
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var resp *pb.OpenSessionResponse
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		var err error
		resp, err = pb.NewLocksClient(s.cc).OpenSession(octx, &pb.OpenSessionRequest{Namespace: r.cfg.Namespace, Label: "bench-idle", Ttl: durationpb.New(r.cfg.TTL)})
		if err == nil {
			break
		}
		if status.Code(err) != codes.Unavailable || octx.Err() != nil {
			return err
		}
		r.retries.Add(1)
		sleepCtx(octx, backoff)
	}
	s.id, s.index, s.secret = resp.SessionId, resp.Index, resp.Secret
	s.acked.Store(int64(r.now()))
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		err := r.attach(ctx, octx, s) // the stream lives as long as the run
		switch {
		case err == nil:
			return nil
		case status.Code(err) == codes.FailedPrecondition: // it has ended
			s.ended.Store(true)
			r.expired.Add(1)
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case status.Code(err) != codes.Unavailable || octx.Err() != nil:
			r.streamErrs.Add(1)
			return nil // the sender attaches it again
		}
		r.retries.Add(1)
		sleepCtx(octx, backoff)
	}
}

// attach opens the session's stream, which lives as long as ctx, and
// starts reading it. The attach itself (until the node's Synced) is bounded
// by actx.
func (r *idleRun) attach(ctx, actx context.Context, s *idleSession) error {
	sctx, cancel := context.WithCancel(ctx)
	ok := false
	defer func() {
		if !ok {
			cancel()
		}
	}()
	stop := context.AfterFunc(actx, cancel)
	defer stop()
	st, err := pb.NewLocksClient(s.cc).Session(sctx)
	if err != nil {
		return err
	}
	if err := st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Attach{Attach: &pb.Attach{Namespace: r.cfg.Namespace, SessionId: s.id, MinIndex: s.index, SessionSecret: s.secret}}}); err != nil {
		return err
	}
	m, err := st.Recv()
	if err != nil {
		return err
	}
	if m.GetSynced() == nil {
		return errors.New("session stream did not start with a sync")
	}
	if !stop() { // actx ended meanwhile: the stream is cancelled
		return actx.Err()
	}
	ok = true
	s.stream.Store(&sessionStream{st})
	go r.read(ctx, s, st)
	return nil
}

// read consumes acks and events until the stream ends.
func (r *idleRun) read(ctx context.Context, s *idleSession, st pb.Locks_SessionClient) {
	for {
		m, err := st.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if status.Code(err) == codes.FailedPrecondition {
				if s.ended.CompareAndSwap(false, true) {
					r.expired.Add(1)
				}
				return
			}
			r.streamErrs.Add(1)
			s.stream.Store(nil) // the sender reattaches
			return
		}
		switch k := m.Kind.(type) {
		case *pb.SessionDown_HeartbeatAck:
			sent := s.sentAt[k.HeartbeatAck.Id%4].Load()
			// Before the ack moves it: had a TTL passed since the newest
			// acknowledged send? (The senders look only now and then.)
			r.checkJeopardy(s, r.now())
			if r.recording.Load() {
				r.acks.Add(1)
				r.ackLat.Record(r.now() - time.Duration(sent))
			}
			if sent > s.acked.Load() {
				s.acked.Store(sent)
			}
		case *pb.SessionDown_Event:
			if k.Event.Kind == pb.Event_SESSION_ENDED && s.ended.CompareAndSwap(false, true) {
				r.expired.Add(1)
			}
		}
	}
}

func (r *idleRun) progress() func() {
	var lastH, lastA int64
	return everySecond(r.cfg.Progress, func(w io.Writer) {
		h, a := r.hbs.Load(), r.acks.Load()
		fmt.Fprintf(w, "%5.1fs idle: heartbeats %d/s acks %d/s  ack p99 %.2fms  expired %d  jeopardy %d  stream errors %d\n",
			r.now().Seconds(), h-lastH, a-lastA, ms(r.ackLat.Quantile(0.99)), r.expired.Load(), r.jeopardy.Load(), r.streamErrs.Load())
		lastH, lastA = h, a
	})
}

// closeAll closes the sessions that are still open, bounded in time.
func (r *idleRun) closeAll(ss []*idleSession) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sem := make(chan struct{}, 256)
	var wg sync.WaitGroup
	for _, s := range ss {
		if s == nil || s.ended.Load() {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_, _ = pb.NewLocksClient(s.cc).CloseSession(ctx, &pb.CloseSessionRequest{Namespace: r.cfg.Namespace, SessionId: s.id, SessionSecret: s.secret})
		}()
	}
	wg.Wait()
}

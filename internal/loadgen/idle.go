package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
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

// streamsPerConn is the most session streams the idle workload opens on
// one connection.
const streamsPerConn = 100

// IdleConfig configures RunIdle.
type IdleConfig struct {
	Endpoints    []string
	Namespace    string
	Sessions     int
	TTL          time.Duration // 0: 10s, the default
	Duration     time.Duration // the measured window
	ConnsPerNode int           // 0: 8; more if the sessions need them (streamsPerConn)
	// PIDs are the nodes' process ids, by endpoint, for CPU and RSS (nil:
	// not measured). LeaderPID tells which one leads now.
	PIDs      []int
	LeaderPID func() int
	Progress  io.Writer

	// LockSessions, if above 0, makes the first LockSessions sessions hold
	// one lock each, LockPrefix followed by the session's number, acquired
	// (a unary Request) once the session is attached (the failover
	// workload).
	LockSessions int
	LockPrefix   string
	// ReattachMin and ReattachMax, if ReattachMax is set, make a session
	// whose stream failed (or whose attach failed) wait a uniformly random
	// time between them and attach again on a connection to a node picked
	// at random, again and again, with no bound on the attaches in flight:
	// clients that come back promptly, as in a reconnect storm. Unset, a
	// session is attached again on its own connection after a backoff of
	// 50 ms doubling to 1 s, at most reattachers at a time.
	ReattachMin, ReattachMax time.Duration
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
	num     int // its place among the run's sessions
	id      uint64
	secret  []byte
	cc      *grpc.ClientConn
	index   atomic.Uint64                 // the highest raft index the session has seen
	stream  atomic.Pointer[sessionStream] // nil: the sender reattaches
	sentAt  [4]atomic.Int64               // by heartbeat id mod 4, ns since start
	nextID  uint64                        // owned by the sender
	due     time.Duration                 // owned by the sender
	slot    int64                         // owned by the sender: where on its wheel the session is
	beatNow atomic.Bool                   // just attached again: heartbeat at the sender's next tick
	node    atomic.Int32                  // the endpoint its stream is attached to
	acked   atomic.Int64                  // send time of the newest acknowledged heartbeat
	ended   atomic.Bool
	jeopard atomic.Bool
	// attaching is set while a goroutine attaches the stream again.
	attaching atomic.Bool
	// locked: the session holds its lock (request id 1); lockLost: the
	// cluster said it no longer does (an event, a Synced, its end).
	locked   atomic.Bool
	lockLost atomic.Bool
}

// seen raises the highest index the session has seen to i.
func (s *idleSession) seen(i uint64) {
	for {
		old := s.index.Load()
		if i <= old || s.index.CompareAndSwap(old, i) {
			return
		}
	}
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

	conns []*grpc.ClientConn // ConnsPerNode per endpoint, endpoint i at i mod len(Endpoints)
	ss    []*idleSession
	// stopSenders stops the senders, the streams and the reattaches;
	// senders counts the senders' goroutines.
	stopSenders context.CancelFunc
	senders     sync.WaitGroup
	lockLost    atomic.Int64
	nodeOf      map[*grpc.ClientConn]int // a connection's endpoint
	// endedBy counts, per endpoint, the streams that ended there with an
	// error while the run went on (the node ended them, or died).
	endedBy []atomic.Int64
	whyMu   sync.Mutex
	why     map[string]int64 // streams ended with an error, by why (streamEnd)
	// Attaches after a session's first (reattaches) by the second they
	// succeeded in, and every attach tried after the first.
	reattached, reattachTries perSecond
}

// perSecond counts events by the second of the run they happened in.
type perSecond struct {
	mu sync.Mutex
	n  []int64
}

func (p *perSecond) add(at time.Duration) {
	i := int(at / time.Second)
	p.mu.Lock()
	for len(p.n) <= i {
		p.n = append(p.n, 0)
	}
	p.n[i]++
	p.mu.Unlock()
}

// window returns the events from the second of from to the second of to
// (both included), and the most in one of those seconds.
func (p *perSecond) window(from, to time.Duration) (total, peak int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := int(from / time.Second); i <= int(to/time.Second) && i < len(p.n); i++ {
		total += p.n[i]
		peak = max(peak, p.n[i])
	}
	return total, peak
}

func (r *idleRun) now() time.Duration { return time.Since(r.start) }

// RunIdle opens cfg.Sessions sessions, keeps them alive for cfg.Duration
// with heartbeats only, and reports the heartbeat cost and any expiry.
func RunIdle(ctx context.Context, cfg IdleConfig) (*IdleResult, error) {
	r, err := startIdle(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer r.closeConns()
	defer r.stop()
	cfg = r.cfg
	ss := r.ss
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
	r.stop()
	res.Heartbeats, res.Acks = r.hbs.Load(), r.acks.Load()
	res.HeartbeatsSec = rate(res.Heartbeats, window)
	res.AckLatency = r.ackLat.Summary()
	res.Expired, res.Jeopardy, res.StreamErrors = r.expired.Load(), r.jeopardy.Load(), r.streamErrs.Load()
	res.OpenRetries = r.retries.Load()
	r.closeAll(ss)
	return res, nil
}

// startIdle dials the connections, starts the senders and opens (and
// attaches) every session of cfg. The caller stops the senders (stop) and
// closes the connections (closeConns).
func startIdle(ctx context.Context, cfg IdleConfig) (*idleRun, error) {
	if cfg.TTL == 0 {
		cfg.TTL = 10 * time.Second
	}
	if cfg.ConnsPerNode <= 0 {
		cfg.ConnsPerNode = 8
	}
	// A node lets one connection carry a bounded number of streams (serve
	// --max-concurrent-streams, 256 by default); one past it waits. Keep
	// to streamsPerConn, so that the sessions of a killed node, moving to
	// the others' connections at random, still fit.
	if len(cfg.Endpoints) > 0 {
		cfg.ConnsPerNode = max(cfg.ConnsPerNode, (cfg.Sessions+len(cfg.Endpoints)*streamsPerConn-1)/(len(cfg.Endpoints)*streamsPerConn))
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	r := &idleRun{cfg: cfg, start: time.Now(), attachSem: make(chan struct{}, reattachers)}
	// A node that was killed comes back within seconds: gRPC's reconnect
	// backoff (up to two minutes by default) must not keep its
	// connections away for longer than that.
	cp := grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: 5 * time.Second}
	cp.Backoff.MaxDelay = time.Second
	for range cfg.ConnsPerNode {
		for _, ep := range cfg.Endpoints {
			cc, err := grpc.NewClient(ep, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithConnectParams(cp),
				grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
			if err != nil {
				r.closeConns()
				return nil, err
			}
			r.conns = append(r.conns, cc)
		}
	}
	r.nodeOf = map[*grpc.ClientConn]int{}
	for k, cc := range r.conns {
		r.nodeOf[cc] = k % len(cfg.Endpoints)
	}
	r.endedBy, r.why = make([]atomic.Int64, len(cfg.Endpoints)), map[string]int64{}
	sctx, stop := context.WithCancel(ctx)
	r.stopSenders = stop
	// The senders run from the start: a session heartbeats as soon as it
	// is attached, while the others are still being opened.
	for i := range r.shards {
		r.senders.Add(1)
		go func() { defer r.senders.Done(); r.send(sctx, &r.shards[i]) }()
	}
	r.ss = make([]*idleSession, cfg.Sessions)
	if err := r.openAll(sctx, r.ss, r.conns); err != nil {
		r.stop()
		r.closeConns()
		return nil, err
	}
	return r, nil
}

// stop stops the senders, the session streams and the reattaches.
func (r *idleRun) stop() {
	r.stopSenders()
	r.senders.Wait()
}

func (r *idleRun) closeConns() {
	for _, cc := range r.conns {
		cc.Close()
	}
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
			s := &idleSession{num: i, cc: conns[i%len(conns)]}
			err := r.open(ctx, s)
			if err == nil {
				ss[i] = s
				sh := &r.shards[i%len(r.shards)]
				s.due = r.now()
				sh.add(s)
				if i < r.cfg.LockSessions {
					err = r.lock(ctx, s)
				}
			}
			if err != nil {
				err = fmt.Errorf("session %d of %d: %w", i+1, len(ss), err)
				first.CompareAndSwap(nil, &err)
				return
			}
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
	s.id, s.secret = resp.SessionId, resp.Secret
	s.seen(resp.Index)
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
	if err := st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Attach{Attach: &pb.Attach{Namespace: r.cfg.Namespace, SessionId: s.id, MinIndex: s.index.Load(), SessionSecret: s.secret}}}); err != nil {
		return err
	}
	m, err := st.Recv()
	if err != nil {
		return err
	}
	synced := m.GetSynced()
	if synced == nil {
		return errors.New("session stream did not start with a sync")
	}
	s.seen(synced.Index)
	if s.locked.Load() && !holds(synced) {
		r.loseLock(s)
	}
	if !stop() { // actx ended meanwhile: the stream is cancelled
		return actx.Err()
	}
	ok = true
	s.node.Store(int32(r.nodeOf[s.cc]))
	s.stream.Store(&sessionStream{st})
	go func() {
		defer cancel() // the stream has ended: release its context
		r.read(ctx, s, st)
	}()
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
			if r.endedBy != nil {
				r.endedBy[s.node.Load()].Add(1)
				w := streamEnd(err)
				r.whyMu.Lock()
				r.why[w]++
				r.whyMu.Unlock()
			}
			s.stream.Store(nil) // the sender reattaches
			if r.cfg.ReattachMax > 0 && s.attaching.CompareAndSwap(false, true) {
				go r.reattach(ctx, s) // at once: clients that come back promptly
			}
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
			s.seen(k.Event.Index)
			switch {
			case k.Event.Kind == pb.Event_SESSION_ENDED:
				if s.ended.CompareAndSwap(false, true) {
					r.expired.Add(1)
				}
				if s.locked.Load() {
					r.loseLock(s)
				}
			case k.Event.Kind == pb.Event_LOCK_LOST && k.Event.RequestId == lockRequest && s.locked.Load():
				r.loseLock(s)
			}
		}
	}
}

// streamEnd says in a few words why a session stream ended with err.
func streamEnd(err error) string {
	st := status.Convert(err)
	msg := st.Message()
	switch {
	case strings.Contains(msg, "knows no leader"):
		return "the node knows no leader"
	case strings.Contains(msg, "shutting down"):
		return "the node is shutting down"
	case strings.Contains(msg, "too far behind"):
		return "the event stream fell behind"
	case st.Code() == codes.Unavailable:
		return "connection lost"
	}
	return st.Code().String()
}

// lockRequest is the request id of a session's lock.
const lockRequest = 1

// lock acquires the session's lock, retrying while no leader answers (up
// to a minute), and fails if it is not granted at once: every session
// locks a name of its own.
func (r *idleRun) lock(ctx context.Context, s *idleSession) error {
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req := &pb.LockRequest{Namespace: r.cfg.Namespace, SessionId: s.id, RequestId: lockRequest, SessionSecret: s.secret,
		Names: []string{fmt.Sprintf("%s%d", r.cfg.LockPrefix, s.num)}}
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		resp, err := pb.NewLocksClient(r.home(s)).Request(lctx, req)
		if err == nil {
			if resp.Status != pb.Status_STATUS_GRANTED {
				return fmt.Errorf("lock %q: %s, want granted", req.Names[0], resp.Status)
			}
			s.seen(resp.Index)
			s.locked.Store(true)
			return nil
		}
		if status.Code(err) != codes.Unavailable || lctx.Err() != nil {
			return fmt.Errorf("lock %q: %w", req.Names[0], err)
		}
		r.retries.Add(1)
		sleepCtx(lctx, backoff)
	}
}

// home is the connection s was opened on. (s.cc is where its stream is,
// and changes while the session's reattach goroutine runs.)
func (r *idleRun) home(s *idleSession) *grpc.ClientConn { return r.conns[s.num%len(r.conns)] }

// holds reports whether a Synced says the session holds its lock.
func holds(m *pb.Synced) bool {
	for _, q := range m.Requests {
		if q.RequestId == lockRequest {
			return q.Status == pb.Status_STATUS_GRANTED
		}
	}
	return false
}

// loseLock counts s's lock lost, once.
func (r *idleRun) loseLock(s *idleSession) {
	if s.lockLost.CompareAndSwap(false, true) {
		r.lockLost.Add(1)
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
			_, _ = pb.NewLocksClient(r.home(s)).CloseSession(ctx, &pb.CloseSessionRequest{Namespace: r.cfg.Namespace, SessionId: s.id, SessionSecret: s.secret})
		}()
	}
	wg.Wait()
}

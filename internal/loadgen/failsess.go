package loadgen

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/lockcluster/lockcluster"
	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// The failover workload with many sessions (FailoverConfig.Sessions): the
// sessions speak the protocol directly, as the idle workload's do (a few
// HTTP/2 connections per node carry all the streams), each holds one lock
// of its own and heartbeats every TTL/3, and a session whose stream fails
// attaches again ReattachMin..ReattachMax later (uniformly jittered, 50-250
// ms by default) on a connection to a node picked at random, however often
// that fails: the reconnect storm that a leader's death starts. The leader
// is killed (SIGKILL) Trials times, and restarted (and caught up) between
// kills. Each kill is followed until the cluster is stable again: a leader
// that kept its term for StableFor, and every session with a heartbeat
// acknowledged that it sent after the kill (bounded by TrialMax).
//
// What a trial measures, from the kill: a survivor reporting itself leader
// (elected); the first grant of a fresh request, made after the kill by
// Probes sessions of their own, each retrying every 25 ms on the survivors
// (first grant); when the leadership that lasted began (stable); the terms
// begun meanwhile (every election tried begins one), the leaders elected
// (raft's raft_state_leader counter on /metrics, where the nodes export it),
// the survivors' "stepping down" and "heartbeat timeout reached" log lines;
// the sessions' reattaches per second; the survivors' and the load
// generator's CPU; the sessions that went into jeopardy (a whole TTL
// without an acknowledged heartbeat: the Go client gives up its locks
// then).

// FailoverSessions is what a failover run with many sessions measured
// over the whole run.
type FailoverSessions struct {
	Sessions int     `json:"sessions"`
	TTLMS    float64 `json:"ttl_ms"`
	OpenS    float64 `json:"open_s"` // opening, attaching and locking them all
	// ReattachMS is the window of the jittered wait before every attach.
	ReattachMS [2]float64 `json:"reattach_ms"`
	// Expired counts sessions the cluster ended; Jeopardy sessions that
	// went a whole TTL without an acknowledged heartbeat (a client would
	// count its lock lost then); LocksLost locks the cluster said a session
	// no longer held (an event, a Synced, the session's end); LocksHeld
	// the sessions' locks the cluster reported held at the end (a Query).
	Expired      int64 `json:"expired"`
	Jeopardy     int64 `json:"jeopardy"`
	LocksLost    int64 `json:"locks_lost"`
	LocksHeld    int64 `json:"locks_held_at_end"`
	StreamErrors int64 `json:"stream_errors"`
	Reattaches   int64 `json:"reattaches"`
	AttachTries  int64 `json:"attach_tries"`
	// Unstable counts kills after which no leader kept its term for
	// StableFor before TrialMax.
	Unstable int `json:"unstable"`
	// StableP50MS and StableMaxMS: from the kill until the leadership that
	// lasted began.
	StableP50MS float64 `json:"stable_p50_ms"`
	StableMaxMS float64 `json:"stable_max_ms"`
	// RecoveredP50MS and RecoveredMaxMS: from the kill until every session
	// had a heartbeat acknowledged that it sent after the kill.
	RecoveredP50MS float64 `json:"recovered_p50_ms"`
	RecoveredMaxMS float64 `json:"recovered_max_ms"`
	StepDowns      int64   `json:"step_downs"`
	Terms          uint64  `json:"terms"`
}

// SessionTrial is what a kill measured beyond FailoverTrial's times.
type SessionTrial struct {
	// StableMS: from the kill until the leadership that then kept its term
	// for StableFor began; Stable is false if none did before TrialMax.
	StableMS float64 `json:"stable_ms"`
	Stable   bool    `json:"stable"`
	Leader   string  `json:"leader,omitempty"` // the stable leader
	// Terms begun on the survivors from the kill until stable: every
	// election tried begins one.
	Terms uint64 `json:"terms"`
	// Leaders elected (raft_state_leader on the survivors' /metrics; -1
	// when the nodes do not export it), candidacies (raft_state_candidate)
	// and the survivors' log lines "stepping down" (a leader that failed
	// to contact a quorum, or saw a newer leader) and "heartbeat timeout
	// reached" (a follower that started an election).
	Leaders          int64 `json:"leaders_elected"`
	Candidacies      int64 `json:"candidacies"`
	StepDowns        int64 `json:"step_downs"`
	ElectionsStarted int64 `json:"heartbeat_timeouts"`
	// RecoveredHalfMS and RecoveredMS: from the kill until half of, and
	// every, session had a heartbeat acknowledged that it sent after the
	// kill (0 for RecoveredMS if not before the trial ended).
	RecoveredHalfMS float64 `json:"recovered_half_ms"`
	RecoveredMS     float64 `json:"recovered_ms"`
	// Reattaches in the trial's window (kill to its end), per second on
	// average and in the busiest second, and attaches tried (successful or
	// not) in the busiest second.
	Reattaches          int64   `json:"reattaches"`
	ReattachesPerSec    float64 `json:"reattaches_per_sec"`
	PeakReattachesSec   int64   `json:"peak_reattaches_per_sec"`
	PeakAttachTriesSec  int64   `json:"peak_attach_tries_per_sec"`
	WindowS             float64 `json:"window_s"`
	LeaderCores         float64 `json:"leader_cpu_cores"` // the stable leader's, over the window
	FollowerCores       float64 `json:"follower_cpu_cores"`
	LoadGeneratorCores  float64 `json:"load_generator_cpu_cores"`
	Jeopardy            int64   `json:"jeopardy"` // sessions that went into jeopardy in this trial
	Expired             int64   `json:"expired"`
	LocksLost           int64   `json:"locks_lost"`
	SettledBeforeKillMS float64 `json:"settled_before_kill_ms"` // waiting for every session to be acked before the kill
	// OnKilled: the sessions attached to the killed node when it was
	// killed; EndedBySurvivors: the streams that ended with an error on the
	// survivors during the trial (a node that knows no leader ends a stream
	// at its first heartbeat); StreamEnds: every stream that ended with an
	// error during the trial, by why.
	OnKilled         int              `json:"sessions_on_killed"`
	EndedBySurvivors int64            `json:"streams_ended_by_survivors"`
	StreamEnds       map[string]int64 `json:"stream_ends,omitempty"`
	// RestartedMS: when the killed node was started again, from the kill
	// (0: after the trial, which then also ended without a grant).
	RestartedMS float64 `json:"restarted_ms"`
}

// sessionProbes is how many sessions make the fresh requests after each
// kill (FailoverConfig.Probes, 0: this many).
const sessionProbes = 4

// runFailoverSessions is RunFailover with cfg.Sessions > 0.
func runFailoverSessions(ctx context.Context, cfg FailoverConfig) (*FailoverResult, error) {
	if cfg.StableFor <= 0 {
		cfg.StableFor = 5 * time.Second
	}
	if cfg.TrialMax <= 0 {
		cfg.TrialMax = 2 * time.Minute
	}
	if cfg.ReattachMax <= 0 {
		cfg.ReattachMin, cfg.ReattachMax = 50*time.Millisecond, 250*time.Millisecond
	}
	c := cfg.Cluster
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, "opening %d sessions (and %d probes), each locking a name of its own...\n", cfg.Sessions, cfg.Probes)
	}
	r, err := startIdle(ctx, IdleConfig{Endpoints: c.Addrs(), Sessions: cfg.Sessions + cfg.Probes, TTL: cfg.TTL, ConnsPerNode: cfg.ConnsPerNode,
		Progress: cfg.Progress, LockSessions: cfg.Sessions, LockPrefix: cfg.Prefix + "s/", ReattachMin: cfg.ReattachMin, ReattachMax: cfg.ReattachMax})
	if err != nil {
		return nil, err
	}
	defer r.closeConns()
	defer r.stop()
	fs := &FailoverSessions{Sessions: cfg.Sessions, TTLMS: ms(r.cfg.TTL), OpenS: float64(int64(r.now().Seconds()*10)) / 10,
		ReattachMS: [2]float64{ms(cfg.ReattachMin), ms(cfg.ReattachMax)}}
	res := &FailoverResult{Sessions: fs}
	stopProgress := sync.OnceFunc(r.failoverProgress())
	defer stopProgress()
	var electedAll, grantAll, stableAll, recoveredAll []time.Duration
	for t := range cfg.Trials {
		if err := c.CaughtUp(ctx, 60*time.Second); err != nil {
			return nil, err
		}
		settle := r.waitAcked(ctx, time.Minute)
		sleepCtx(ctx, cfg.Gap)
		leader, err := c.Leader(ctx, 10*time.Second)
		if err != nil {
			return nil, err
		}
		tr, st := r.killTrial(ctx, cfg, leader, t)
		st.SettledBeforeKillMS = ms(settle)
		tr.Sessions = st
		res.Trials = append(res.Trials, tr)
		electedAll, grantAll = append(electedAll, time.Duration(tr.ElectedMS*1e6)), append(grantAll, time.Duration(tr.FirstGrantMS*1e6))
		if st.Stable {
			stableAll = append(stableAll, time.Duration(st.StableMS*1e6))
		} else {
			fs.Unstable++
			stableAll = append(stableAll, cfg.TrialMax)
		}
		recoveredAll = append(recoveredAll, time.Duration(st.RecoveredMS*1e6))
		if st.RecoveredMS == 0 {
			recoveredAll[len(recoveredAll)-1] = cfg.TrialMax
		}
		fs.StepDowns += st.StepDowns
		fs.Terms += st.Terms
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "trial %d/%d: killed %s; leader in %s, first grant %s, stable %s (%d terms, %d step-downs), every session acked again %s after the kill; %d streams on the killed node, %d ended by the survivors; %d reattaches (peak %d/s); jeopardy %d\n",
				t+1, cfg.Trials, tr.Killed, msStr(tr.ElectedMS), msStr(tr.FirstGrantMS), msStr(st.StableMS), st.Terms, st.StepDowns, msStr(st.RecoveredMS),
				st.OnKilled, st.EndedBySurvivors, st.Reattaches, st.PeakReattachesSec, st.Jeopardy)
		}
		if st.RestartedMS == 0 { // not restarted during the trial
			if err := c.Start(leader); err != nil {
				return nil, err
			}
		}
	}
	if err := c.CaughtUp(ctx, 60*time.Second); err != nil {
		return nil, err
	}
	r.waitAcked(ctx, time.Minute)
	stopProgress()
	end := r.now()
	for _, s := range r.ss {
		if !s.ended.Load() {
			r.checkJeopardy(s, end)
		}
	}
	fs.LocksHeld = r.heldLocks(ctx)
	r.stop()
	fs.Expired, fs.Jeopardy, fs.LocksLost, fs.StreamErrors = r.expired.Load(), r.jeopardy.Load(), r.lockLost.Load(), r.streamErrs.Load()
	fs.Reattaches, _ = r.reattached.window(0, end)
	fs.AttachTries, _ = r.reattachTries.window(0, end)
	res.FirstGrantP50MS, res.ElectedP50MS = ms(median(grantAll)), ms(median(electedAll))
	res.FirstGrantMaxMS = ms(slices.Max(grantAll))
	fs.StableP50MS, fs.StableMaxMS = ms(median(stableAll)), ms(slices.Max(stableAll))
	fs.RecoveredP50MS, fs.RecoveredMaxMS = ms(median(recoveredAll)), ms(slices.Max(recoveredAll))
	res.SessionsLost = fs.Expired
	res.HolderLost = fs.LocksLost > 0
	return res, nil
}

func msStr(v float64) string { return (time.Duration(v * 1e6)).Round(time.Millisecond).String() }

// killTrial kills node leader and follows the cluster until it is stable
// again (or cfg.TrialMax passes).
func (r *idleRun) killTrial(ctx context.Context, cfg FailoverConfig, leader, trial int) (FailoverTrial, *SessionTrial) {
	c := cfg.Cluster
	tr := FailoverTrial{Killed: c.Nodes[leader].ID}
	st := &SessionTrial{}
	var survivors []int
	var addrs, names []string
	var pids []int
	for i, nd := range c.Nodes {
		if i != leader {
			survivors = append(survivors, i)
			addrs = append(addrs, nd.GRPC)
			names, pids = append(names, nd.ID), append(pids, c.PID(i))
		}
	}
	admin, err := lockcluster.DialAdmin(addrs)
	if err != nil {
		return tr, st
	}
	defer admin.Close()
	termBefore := uint64(0)
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	for _, s := range admin.Status(sctx) {
		termBefore = max(termBefore, s.Term)
	}
	cancel()
	countersBefore := make([]map[string]float64, len(survivors))
	logFrom := make([]int64, len(survivors))
	for k, i := range survivors {
		countersBefore[k] = raftCounters(ctx, c.Nodes[i].HTTP)
		if fi, err := os.Stat(c.Nodes[i].Log); err == nil {
			logFrom[k] = fi.Size()
		}
	}
	jBefore, eBefore, lBefore := r.jeopardy.Load(), r.expired.Load(), r.lockLost.Load()
	var endedBefore int64
	for _, i := range survivors {
		endedBefore += r.endedBy[i].Load()
	}
	r.whyMu.Lock()
	whyBefore := maps.Clone(r.why)
	r.whyMu.Unlock()
	for _, s := range r.ss {
		if s != nil && !s.ended.Load() && s.stream.Load() != nil && int(s.node.Load()) == leader {
			st.OnKilled++
		}
	}
	meter := StartCPU(append(names, "bench"), append(pids, 0))

	// The kill, then the probes' fresh requests on the survivors.
	killed := time.Now()
	from := r.now()
	_ = c.Kill(leader)
	var conns []*grpc.ClientConn
	for k, cc := range r.conns {
		if slices.Contains(survivors, k%len(c.Nodes)) {
			conns = append(conns, cc)
		}
	}
	probes := r.ss[len(r.ss)-cfg.Probes:]
	grants := make([]time.Duration, len(probes))
	granted := make(chan struct{})
	var grantOnce sync.Once
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("%sprobe/%d/%d", cfg.Prefix, trial, i)
			grants[i] = r.probe(ctx, p, name, uint64(2+trial), conns[i%len(conns):], killed, cfg.TrialMax)
			if grants[i] < cfg.TrialMax {
				grantOnce.Do(func() { close(granted) })
			}
		}()
	}
	var firstGrant time.Duration // since the kill, once known
	probesDone := make(chan struct{})
	go func() { wg.Wait(); close(probesDone) }()

	// Follow the leadership and the sessions until stable.
	type lead struct {
		id   string
		term uint64
	}
	var cur lead
	var since time.Duration // since the kill: when cur was first seen
	var half time.Duration
	stable := false
	for {
		el := time.Since(killed)
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		sts := admin.Status(pctx)
		cancel()
		var seen lead
		answered := false
		for _, s := range sts {
			if s.Err != "" {
				continue
			}
			answered = true
			if s.State == "Leader" && s.Term >= seen.term {
				seen = lead{s.NodeID, s.Term}
			}
		}
		if seen.id == "" {
			for _, s := range sts {
				if s.Err == "" && s.LeaderID != "" && s.LeaderID != tr.Killed && s.Term >= cur.term {
					seen = lead{s.LeaderID, s.Term}
				}
			}
		}
		switch {
		case !answered: // no news: keep what was seen
		case seen.id == "":
			cur = lead{}
		case seen != cur:
			cur, since = seen, el
		}
		if tr.ElectedMS == 0 && seen.id != "" {
			tr.ElectedMS = ms(el)
		}
		stable = cur.id != "" && el-since >= cfg.StableFor
		acked, live := r.ackedSince(from)
		if half == 0 && 2*acked >= live {
			half = el
		}
		if st.RecoveredMS == 0 && acked == live {
			st.RecoveredMS = ms(el)
		}
		probed := false
		select {
		case <-probesDone:
			probed = true
		default:
		}
		// The killed node comes back RestartAfter the first grant, as in
		// the failover workload without sessions (at once by default):
		// it catches up while the sessions come back.
		select {
		case <-granted:
			if firstGrant == 0 {
				firstGrant = el
			}
		default:
		}
		if st.RestartedMS == 0 && firstGrant > 0 && el >= firstGrant+cfg.RestartAfter {
			if err := c.Start(leader); err == nil {
				st.RestartedMS = ms(time.Since(killed))
			}
		}
		if stable && st.RecoveredMS > 0 && probed || el >= cfg.TrialMax || ctx.Err() != nil {
			break
		}
		wait := 100 * time.Millisecond
		if tr.ElectedMS == 0 || firstGrant == 0 {
			wait = 20 * time.Millisecond
		}
		sleepCtx(ctx, wait)
	}
	<-probesDone
	tr.FirstGrantMS = ms(slices.Min(grants))
	st.RecoveredHalfMS = ms(half)
	st.Stable, st.Leader = stable, cur.id
	if stable {
		st.StableMS = ms(since)
	}
	if cur.term > termBefore {
		st.Terms = cur.term - termBefore
	}
	to := r.now()
	usage := meter.Stop()
	for k, u := range usage {
		switch {
		case k == len(usage)-1:
			st.LoadGeneratorCores = u.Cores
		case u.Name == cur.id:
			st.LeaderCores = u.Cores
		default:
			st.FollowerCores = max(st.FollowerCores, u.Cores)
		}
	}
	st.WindowS = float64(int64((to-from).Seconds()*10)) / 10
	st.Reattaches, st.PeakReattachesSec = r.reattached.window(from, to)
	_, st.PeakAttachTriesSec = r.reattachTries.window(from, to)
	st.ReattachesPerSec = rate(st.Reattaches, (to - from).Seconds())
	st.Jeopardy, st.Expired, st.LocksLost = r.jeopardy.Load()-jBefore, r.expired.Load()-eBefore, r.lockLost.Load()-lBefore
	for _, i := range survivors {
		st.EndedBySurvivors += r.endedBy[i].Load()
	}
	st.EndedBySurvivors -= endedBefore
	r.whyMu.Lock()
	st.StreamEnds = map[string]int64{}
	for w, n := range r.why {
		if d := n - whyBefore[w]; d > 0 {
			st.StreamEnds[w] = d
		}
	}
	r.whyMu.Unlock()
	st.Leaders, st.Candidacies = -1, -1
	for k, i := range survivors {
		after := raftCounters(ctx, c.Nodes[i].HTTP)
		if l, ok := after["raft_state_leader"]; ok {
			st.Leaders = max(st.Leaders, 0) + int64(l-countersBefore[k]["raft_state_leader"])
		}
		if l, ok := after["raft_state_candidate"]; ok {
			st.Candidacies = max(st.Candidacies, 0) + int64(l-countersBefore[k]["raft_state_candidate"])
		}
		down, timeouts := countLogLines(c.Nodes[i].Log, logFrom[k])
		st.StepDowns += down
		st.ElectionsStarted += timeouts
	}
	return tr, st
}

// probe makes one fresh request for name in session s (request id id),
// retrying every 25 ms, each try on the next of conns, until it is
// granted or bound passes since killed; it returns when it was granted,
// from killed (bound if never), and releases the lock.
func (r *idleRun) probe(ctx context.Context, s *idleSession, name string, id uint64, conns []*grpc.ClientConn, killed time.Time, bound time.Duration) time.Duration {
	req := &pb.LockRequest{Namespace: r.cfg.Namespace, SessionId: s.id, RequestId: id, Names: []string{name}, SessionSecret: s.secret}
	for i := 0; time.Since(killed) < bound && ctx.Err() == nil; i++ {
		cc := conns[i%len(conns)]
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := pb.NewLocksClient(cc).Request(actx, req)
		cancel()
		if err == nil && resp.Status == pb.Status_STATUS_GRANTED {
			at := time.Since(killed)
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, _ = pb.NewLocksClient(cc).Release(rctx, &pb.ReleaseRequest{Namespace: r.cfg.Namespace, SessionId: s.id, RequestId: id, Token: resp.Token, SessionSecret: s.secret})
			cancel()
			return at
		}
		sleepCtx(ctx, 25*time.Millisecond)
	}
	return bound
}

// ackedSince counts the sessions that have not ended and those of them
// with an acknowledged heartbeat sent at or after from.
func (r *idleRun) ackedSince(from time.Duration) (acked, live int) {
	for _, s := range r.ss {
		if s == nil || s.ended.Load() {
			continue
		}
		live++
		if time.Duration(s.acked.Load()) >= from {
			acked++
		}
	}
	return acked, live
}

// waitAcked waits until every session that has not ended has a
// heartbeat acknowledged that it sent after the wait began (bounded by d),
// and returns how long that took.
func (r *idleRun) waitAcked(ctx context.Context, d time.Duration) time.Duration {
	from := r.now()
	for r.now()-from < d && ctx.Err() == nil {
		if acked, live := r.ackedSince(from); acked == live {
			break
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	return r.now() - from
}

// heldLocks counts the sessions' locks that the cluster reports held by
// their sessions (a Query on any node that answers).
func (r *idleRun) heldLocks(ctx context.Context) int64 {
	want := map[string]uint64{}
	for _, s := range r.ss[:r.cfg.LockSessions] {
		want[fmt.Sprintf("%s%d", r.cfg.LockPrefix, s.num)] = s.id
	}
	for _, cc := range r.conns {
		qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		resp, err := pb.NewLocksClient(cc).Query(qctx, &pb.QueryRequest{Namespace: r.cfg.Namespace})
		cancel()
		if err != nil {
			continue
		}
		var n int64
		for _, l := range resp.Held {
			if id, ok := want[l.Name]; ok && id == l.SessionId {
				n++
			}
		}
		return n
	}
	return -1
}

// failoverProgress prints a line a second: the sessions attached and
// acknowledged within a TTL, reattaches in the last second, jeopardy,
// expiries and locks lost so far.
func (r *idleRun) failoverProgress() func() {
	return everySecond(r.cfg.Progress, func(w io.Writer) {
		now := r.now()
		var attached, recent int
		for _, s := range r.ss {
			if s == nil || s.ended.Load() {
				continue
			}
			if s.stream.Load() != nil {
				attached++
			}
			if now-time.Duration(s.acked.Load()) <= r.cfg.TTL/2 {
				recent++
			}
		}
		re, _ := r.reattached.window(now-time.Second, now-time.Second)
		tries, _ := r.reattachTries.window(now-time.Second, now-time.Second)
		fmt.Fprintf(w, "%5.1fs sessions: %d attached, %d acked within TTL/2; reattaches %d/s (tried %d/s); jeopardy %d, expired %d, locks lost %d\n",
			now.Seconds(), attached, recent, re, tries, r.jeopardy.Load(), r.expired.Load(), r.lockLost.Load())
	})
}

// raftCounters reads the raft counters that tell elections apart from a
// node's /metrics (named with or without the lockcluster_ prefix), by
// name without the prefix. Empty when the node does not export them.
func raftCounters(ctx context.Context, httpAddr string) map[string]float64 {
	out := map[string]float64{}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/metrics", nil)
	if err != nil {
		return out
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(f[0], "{")
		name = strings.TrimPrefix(name, "lockcluster_")
		switch name {
		case "raft_state_leader", "raft_state_candidate", "raft_transition_leader_lease_timeout", "raft_transition_heartbeat_timeout":
			if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
				out[name] += v
			}
		}
	}
	return out
}

// countLogLines counts, in a node's log from offset on, raft's lines
// saying that a leader steps down and that a follower's heartbeat timeout
// started an election.
func countLogLines(path string, offset int64) (stepDowns, timeouts int64) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return 0, 0
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "stepping down") {
			stepDowns++
		}
		if strings.Contains(line, "heartbeat timeout reached") {
			timeouts++
		}
	}
	return stepDowns, timeouts
}

func (r *FailoverResult) writeSessions(w io.Writer) {
	fs := r.Sessions
	fmt.Fprintf(w, "sessions\t%d\teach holding a lock, TTL %gms\topened+attached+locked in %.1fs\treattach after %g-%g ms\n",
		fs.Sessions, fs.TTLMS, fs.OpenS, fs.ReattachMS[0], fs.ReattachMS[1])
	fmt.Fprintln(w, "trial\tkilled\telected\tfirst grant\tstable\tterms\tleaders\tstep-downs\telections started\tall acked\ton killed\tended by survivors\treattaches/s (peak)\tleader cpu\tbench cpu\tjeopardy")
	for i, t := range r.Trials {
		st := t.Sessions
		if st == nil {
			continue
		}
		stable := msStr(st.StableMS)
		if !st.Stable {
			stable = "never"
		}
		all := msStr(st.RecoveredMS)
		if st.RecoveredMS == 0 {
			all = "never"
		}
		fmt.Fprintf(w, "  %d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t%.0f (%d)\t%.2f\t%.2f\t%d\n", i+1, t.Killed, msStr(t.ElectedMS), msStr(t.FirstGrantMS),
			stable, st.Terms, st.Leaders, st.StepDowns, st.ElectionsStarted, all, st.OnKilled, st.EndedBySurvivors, st.ReattachesPerSec, st.PeakReattachesSec, st.LeaderCores,
			st.LoadGeneratorCores, st.Jeopardy)
	}
	fmt.Fprintf(w, "first grant after kill\tp50 %.0f ms\tmax %.0f ms\telected p50 %.0f ms\n", r.FirstGrantP50MS, r.FirstGrantMaxMS, r.ElectedP50MS)
	fmt.Fprintf(w, "stable after kill\tp50 %.0f ms\tmax %.0f ms\tunstable %d\tterms %d\tstep-downs %d\n", fs.StableP50MS, fs.StableMaxMS, fs.Unstable, fs.Terms, fs.StepDowns)
	fmt.Fprintf(w, "every session acked again\tp50 %.0f ms\tmax %.0f ms\n", fs.RecoveredP50MS, fs.RecoveredMaxMS)
	fmt.Fprintf(w, "sessions expired\t%d\tin jeopardy %d\tlocks lost %d\tlocks held at the end %d of %d\n", fs.Expired, fs.Jeopardy, fs.LocksLost, fs.LocksHeld, fs.Sessions)
	fmt.Fprintf(w, "reattaches\t%d\tattaches tried %d\tstream errors %d\n", fs.Reattaches, fs.AttachTries, fs.StreamErrors)
}

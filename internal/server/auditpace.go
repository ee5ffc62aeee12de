package server

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Refused credentials are audited (audit.go), but a caller without a
// credential can make thousands of calls a second: written one line each,
// they would fill the node's disk. The refusalPacer bounds the audit
// lines they make. Per peer (the caller's IP address, whatever its port):
//
//   - the first auditRefusalBurst refusals of an interval
//     (Config.AuditRefusalInterval, default 10 s) are written in full, at
//     once;
//   - the further ones are counted, and once the interval is over one line
//     (event=refused-credential-summary) says how many there were, with
//     the last one's method, namespace, code and reason. A peer that keeps
//     being refused gets that one line per interval; one quiet for a whole
//     interval starts afresh.
//
// At most auditRefusalPeers peers are tracked; refusals from peers past
// them are counted together, in one summary line for "other peers". So a
// flood writes at most peers × (burst + 1) lines an interval, and the
// pacer holds a bounded map, whatever the callers send. Every refusal is
// counted in the metrics (lockcluster_refused_calls_total) all the same.

const (
	// DefaultAuditRefusalInterval is Config.AuditRefusalInterval's default.
	DefaultAuditRefusalInterval = 10 * time.Second
	// auditRefusalBurst refusals per peer and interval are written in
	// full: a misconfigured client shows what it tried.
	auditRefusalBurst = 8
	// auditRefusalPeers bounds the peers tracked.
	auditRefusalPeers = 512
)

// otherPeers names, in a summary line, the peers past auditRefusalPeers.
const otherPeers = "other peers"

type refusalPacer struct {
	log hclog.Logger

	mu       sync.Mutex
	interval time.Duration // changes on a reload (setInterval)
	peers    map[string]*peerRefusals
	other    peerRefusals // the peers past auditRefusalPeers, together
}

// peerRefusals is one peer's interval.
type peerRefusals struct {
	since   time.Time     // when the interval began
	written int           // refusals written in full in it
	counted int           // refusals counted, not written, in it
	last    refusalSample // the last one counted
}

// refusalSample is what a summary line tells of the last refusal it
// counts; its strings are bounded already (logsafe).
type refusalSample struct {
	method, namespace, code, reason, peer string
}

func newRefusalPacer(interval time.Duration, log hclog.Logger) *refusalPacer {
	if interval <= 0 {
		interval = DefaultAuditRefusalInterval
	}
	return &refusalPacer{interval: interval, log: log, peers: map[string]*peerRefusals{}}
}

// setInterval changes the interval (a reload; <= 0: the default). The
// intervals under way end by the new one; run's ticker follows at its
// next tick.
func (p *refusalPacer) setInterval(d time.Duration) {
	if d <= 0 {
		d = DefaultAuditRefusalInterval
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.interval = d
}

func (p *refusalPacer) currentInterval() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.interval
}

// peerKey is the host of a caller's address: one peer whatever the port
// of each of its connections.
func peerKey(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// admit reports whether the refusal from addr at now is written in full;
// if not, it is counted for the peer's summary line.
func (p *refusalPacer) admit(now time.Time, addr string, sample refusalSample) bool {
	key := peerKey(addr)
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.peers[key]
	if !ok {
		if len(p.peers) >= auditRefusalPeers {
			if p.other.counted == 0 {
				p.other.since = now
			}
			p.other.counted++
			p.other.last = sample
			return false
		}
		r = &peerRefusals{since: now}
		p.peers[key] = r
	}
	if r.written < auditRefusalBurst {
		r.written++
		return true
	}
	r.counted++
	r.last = sample
	return false
}

// flush writes the summary line of every peer whose interval is over at
// now and that had refusals counted, starting its next interval; it
// forgets the peers whose interval passed without any. With all, it
// writes every counted refusal, over or not (the server stops).
func (p *refusalPacer) flush(now time.Time, all bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, r := range p.peers {
		if !all && now.Sub(r.since) < p.interval {
			continue
		}
		if r.counted == 0 {
			delete(p.peers, key)
			continue
		}
		p.summary(key, r, now)
		// Still refused: its next interval is summarised too.
		*r = peerRefusals{since: now, written: auditRefusalBurst}
	}
	if p.other.counted > 0 && (all || now.Sub(p.other.since) >= p.interval) {
		p.summary(otherPeers, &p.other, now)
		p.other = peerRefusals{}
	}
}

func (p *refusalPacer) summary(peer string, r *peerRefusals, now time.Time) {
	args := []any{"event", "refused-credential-summary", "peer", peer, "refusals", r.counted,
		"since", r.since.UTC().Format(time.RFC3339Nano), "seconds", now.Sub(r.since).Round(time.Millisecond).Seconds(),
		"last_method", r.last.method, "last_namespace", r.last.namespace, "last_code", r.last.code, "last_reason", r.last.reason}
	if peer == otherPeers {
		args = append(args, "last_peer", r.last.peer, "peers_tracked", auditRefusalPeers)
	}
	p.log.Info("audit", args...)
}

// run flushes twice an interval until ctx ends, then writes what is
// left: a summary line comes at most one and a half intervals after its
// interval began.
func (p *refusalPacer) run(ctx context.Context, now func() time.Time) {
	every := func() time.Duration { return max(p.currentInterval()/2, time.Millisecond) }
	period := every()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			p.flush(now(), true)
			return
		case <-t.C:
			p.flush(now(), false)
		}
		if d := every(); d != period {
			period = d
			t.Reset(period)
		}
	}
}

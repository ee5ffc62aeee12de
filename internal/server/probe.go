package server

import (
	"context"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/version"
	"github.com/lockcluster/lockcluster/raftnode"
)

// The leader probes every member's API (a Status call with a deadline of
// a second, or of the interval if longer) and remembers what it saw, so
// that Members, status and the status page can say "unreachable for 12s,
// 40 entries behind", or why a member serves no clients (Status answers
// while the member is fenced: fence.go), instead of listing a dead or
// fenced node as a healthy follower. hashicorp/raft does not expose what
// the leader knows of its followers (their applied index, their version);
// Consul's autopilot asks every server for its stats the same way. It
// does report failed heartbeats, with the follower's last contact
// (raftnode.PeerContact): that is what a member without an API address to
// probe is judged by.

// defaultProbeInterval is how often the leader probes each member.
const defaultProbeInterval = time.Second

type memberSeen struct {
	contact   time.Time // last answer (zero: none in this term)
	reachable bool      // the last probe was answered
	applied   uint64
	commit    uint64 // the leader's commit index when the answer came
	version   string
	unfit     string // why the member is unfit to serve ("" while fit)
	// level is the protocol level the member reported at its last answer
	// (fsm.PreviousLevel when it reported none); 0: it has not answered
	// in this term (level.go).
	level int
}

type prober struct {
	mu   sync.Mutex
	seen map[string]memberSeen // by member id; cleared when leadership is lost
}

// forget clears what the probes saw (a new term).
func (p *prober) forget() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.seen)
}

// probeMembers probes while this node leads, until ctx ends.
func (s *Server) probeMembers(ctx context.Context) {
	interval := s.cfg.ProbeInterval
	if interval <= 0 {
		interval = defaultProbeInterval
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-s.levels.kick:
		}
		r := s.replica()
		if r == nil || !r.IsLeader() {
			s.probes.mu.Lock()
			clear(s.probes.seen)
			s.probes.mu.Unlock()
			continue
		}
		var wg sync.WaitGroup
		for _, m := range s.members.directory() {
			if m.ID == s.cfg.Self.ID || m.GRPCAddr == "" {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.probeOne(ctx, m.ID, m.GRPCAddr, max(interval, time.Second))
			}()
		}
		wg.Wait()
		s.levelProbed() // level.go
		s.members.promoteCaughtUp(ctx)
	}
}

func (s *Server) probeOne(ctx context.Context, id, addr string, timeout time.Duration) {
	cc, err := s.peers.get(addr)
	var st *pb.StatusResponse
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		st, err = pb.NewClusterClient(cc).Status(s.forwardContext(pctx), &pb.StatusRequest{NoPromote: s.members.learners.manualList()})
		cancel()
	}
	commit := s.commitIndex()
	s.probes.mu.Lock()
	defer s.probes.mu.Unlock()
	if s.probes.seen == nil {
		s.probes.seen = map[string]memberSeen{}
	}
	seen := s.probes.seen[id]
	seen.reachable = err == nil
	if err == nil {
		seen.contact, seen.applied, seen.commit, seen.version, seen.unfit = s.cfg.Now(), st.AppliedIndex, commit, st.Version, st.Unfit
		seen.level = reportedLevel(st)
	}
	s.probes.seen[id] = seen
}

func (s *Server) commitIndex() uint64 {
	r := s.replica()
	if r == nil {
		return 0
	}
	v, _ := strconv.ParseUint(r.Stats()["commit_index"], 10, 64)
	return v
}

// describe fills in what the leader saw of member m (this node leads).
func (s *Server) describe(m *pb.Member) {
	if m.Id == s.cfg.Self.ID {
		m.Probed = true
		r := s.replica()
		m.Reachable, m.SinceContact, m.Version, m.Unfit = true, durationpb.New(0), version.Current().Version, unfitText(r)
		m.ProtocolLevel = uint32(s.ownLevel())
		m.AppliedIndex = r.AppliedIndex()
		m.Lag = s.commitIndex() - min(m.AppliedIndex, s.commitIndex())
		return
	}
	s.probes.mu.Lock()
	seen, ok := s.probes.seen[m.Id]
	s.probes.mu.Unlock()
	if !ok {
		// Not probed in this term: its first probe is under way, or it has
		// no API address to probe (it died before it recorded one). Then
		// raft's heartbeats may still tell that it is unreachable, and
		// since when; otherwise it is unknown, not unreachable.
		if pc, ok := s.peerContact(m.Id); ok && pc.Failing {
			m.Probed, m.Reachable = true, false
			if !pc.LastContact.IsZero() {
				m.SinceContact = durationpb.New(time.Since(pc.LastContact)) // raft's clock, not cfg.Now
			}
		}
		return
	}
	m.Probed, m.Reachable, m.AppliedIndex, m.Version, m.Unfit = true, seen.reachable, seen.applied, seen.version, seen.unfit
	m.ProtocolLevel = uint32(seen.level)
	m.Lag = seen.commit - min(seen.applied, seen.commit)
	if !seen.contact.IsZero() {
		m.SinceContact = durationpb.New(s.cfg.Now().Sub(seen.contact))
	}
}

// peerContact is what raft's heartbeats say of member id, when the replica
// keeps that (raftnode.Node does; test fakes need not).
func (s *Server) peerContact(id string) (raftnode.PeerContact, bool) {
	pc, ok := s.replica().(interface {
		PeerContact(id string) (raftnode.PeerContact, bool)
	})
	if !ok {
		return raftnode.PeerContact{}, false
	}
	return pc.PeerContact(id)
}

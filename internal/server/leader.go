package server

import (
	"context"
	"time"

	"github.com/lockcluster/lockcluster/raftnode"
	"github.com/lockcluster/lockcluster/session"
)

// followLeadership starts leader-only work when this node gains leadership
// and stops it when it loses it.
func (s *Server) followLeadership(ctx context.Context) {
	ch, unsubscribe := s.replica().SubscribeLeadership()
	defer unsubscribe()
	var stopTerm context.CancelFunc = func() {}
	defer func() { stopTerm() }()
	for {
		var leader, open bool
		select {
		case <-ctx.Done():
			return
		case leader, open = <-ch:
		}
		stopTerm()
		s.live.Follow()
		if !open {
			return
		}
		if leader {
			termCtx, cancel := context.WithCancel(ctx)
			stopTerm = cancel
			go s.lead(termCtx)
		} else {
			stopTerm = func() {}
		}
	}
}

// lead runs when this node becomes leader: it draws the cluster secret if
// the state has none (member.go), before the re-arm, so that the
// followers' forwarded heartbeats are renewed from the first; once session
// liveness has re-armed every session (after a read barrier,
// session/DESIGN.md), it applies this node's limits, then makes sure the
// member directory has its own record and no stale ones (membership.go);
// then, for the rest of its term, it proposes the limits again each time a
// reload changes them (reload.go).
func (s *Server) lead(ctx context.Context) {
	s.probes.forget() // a new term probes anew: its levels too (level.go)
	s.levels.forget()
	s.probeNow()
	if s.cfg.Group != 0 { // the secret and the directory are group 0's
		if err := s.live.Lead(ctx); err != nil {
			return
		}
		s.log.Info("leading", "group", s.cfg.Group, "applied", s.m.LastIndex())
		s.applyLimits(ctx)
		s.keepLimits(ctx)
		return
	}
	drawn := s.drawClusterSecret(ctx)
	if err := s.live.Lead(ctx); err != nil {
		return
	}
	s.log.Info("leading", "applied", s.m.LastIndex())
	s.applyLimits(ctx) // reload.go
	s.members.lead(ctx)
	// keepDrawing may wait for the protocol level (level.go).
	go s.keepDrawing(ctx, drawn)
	s.keepLimits(ctx) // until the term ends: a reload's new limits
}

// sessionLog is what session liveness reads of this node's log: for
// the re-arm, the read barrier and the applied sessions; for every batch
// of renewals, a confirmation of leadership.
type sessionLog struct{ s *Server }

func (r sessionLog) Barrier(ctx context.Context) error {
	node := r.s.replica()
	if node == nil {
		return raftnode.ErrShutdown
	}
	return node.ReadBarrier(ctx)
}

// Confirm is the read barrier too: raftnode exports no lighter check, and
// the barrier's VerifyLeader round, bound to the term it started in, is
// what the confirmation needs (its term barrier runs once per term; its
// wait for the FSM is short on a leader). Session liveness runs at most
// one per Flush.
func (r sessionLog) Confirm(ctx context.Context) error {
	return r.Barrier(ctx)
}

func (r sessionLog) Sessions() []session.Info {
	infos := r.s.m.Sessions()
	out := make([]session.Info, len(infos))
	for i, in := range infos {
		out[i] = session.Info{ID: in.ID, TTL: time.Duration(in.TTL)}
	}
	return out
}

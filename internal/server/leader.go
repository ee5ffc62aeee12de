package server

import (
	"context"
	"fmt"
	"time"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
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

// lead runs when this node becomes leader: once session liveness has
// re-armed every session (after a read barrier, session/DESIGN.md), it
// applies this node's limits and makes sure the member directory has its
// own record.
func (s *Server) lead(ctx context.Context) {
	if err := s.live.Lead(ctx); err != nil {
		return
	}
	s.log.Info("leading", "applied", s.m.LastIndex())
	if want := s.cfg.Limits; want != nil && *want != s.m.Limits() {
		ap, _, err := s.propose(ctx, &fsm.SetLimits{Limits: *want})
		if err == nil {
			err = ap.Result.Err
		}
		if err != nil && ctx.Err() == nil {
			s.log.Warn("applying this node's limits failed", "error", err)
		} else if err == nil {
			s.log.Info("applied this node's limits to the cluster", "limits", fmt.Sprintf("%+v", *want))
		}
	}
	if !s.registered() {
		if _, err := s.join(ctx, &pb.JoinRequest{Id: s.cfg.Self.ID, RaftAddr: s.cfg.Self.RaftAddr, GrpcAddr: s.cfg.Self.GRPCAddr, HttpAddr: s.cfg.Self.HTTPAddr}); err != nil && ctx.Err() == nil {
			s.log.Warn("recording this node in the member directory failed", "error", err)
		}
	}
}

func (s *Server) registered() bool {
	for _, m := range s.m.Members() {
		if m.ID == s.cfg.Self.ID {
			return m == s.cfg.Self
		}
	}
	return false
}

// register makes sure the member directory holds this node's record, so
// that other nodes can forward to it when it leads. A follower asks the
// leader to record it (Join, record_only); the leader records itself in
// lead.
func (s *Server) register(ctx context.Context) {
	self := s.cfg.Self
	// Record only: a node removed by leave must not add itself back.
	req := &pb.JoinRequest{Id: self.ID, RaftAddr: self.RaftAddr, GrpcAddr: self.GRPCAddr, HttpAddr: self.HTTPAddr, RecordOnly: true}
	wait := 10 * time.Millisecond // the leader records itself first
	for !s.registered() {
		if !s.replica().IsLeader() {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := s.Join(cctx, req)
			cancel()
			if err != nil && ctx.Err() == nil {
				s.log.Debug("recording this node in the member directory: not yet", "error", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// setMember proposes a directory record.
func (s *Server) setMember(ctx context.Context, m fsm.Member, remove bool) error {
	ap, _, err := s.propose(ctx, &fsm.SetMember{Member: m, Remove: remove})
	if err != nil {
		return err
	}
	return ap.Result.Err
}

// sessionReplica is what session liveness reads of this node's log: for
// the re-arm, the read barrier and the applied sessions; for every batch
// of renewals, a confirmation of leadership.
type sessionReplica struct{ s *Server }

func (r sessionReplica) Barrier(ctx context.Context) error {
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
func (r sessionReplica) Confirm(ctx context.Context) error {
	return r.Barrier(ctx)
}

func (r sessionReplica) Sessions() []session.Info {
	infos := r.s.m.Sessions()
	out := make([]session.Info, len(infos))
	for i, in := range infos {
		out[i] = session.Info{ID: in.ID, TTL: time.Duration(in.TTL)}
	}
	return out
}

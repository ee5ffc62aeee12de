package server

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lockcluster/lockcluster/fsm"
)

// Reloading settings (lockcluster serve's SIGHUP). A running server takes
// new values of the settings below without a restart; the rest of Config
// is fixed for its life. Changed:
//
//   - the namespace quotas (entries and bytes a second, and their bursts)
//     and the refusal pacing: the buckets stay, at the new rate and burst
//     (ratelimit.go);
//   - the audit log's refusal interval (auditpace.go);
//   - the token this node presents to the others (an admin token rotated);
//   - the replicated limits it proposes when it leads: a leader proposes
//     the new ones at once (keepLimits), a follower when it next leads.
//
// The session rate (SessionRate, SessionBurst) and the stream backlog are
// fixed for now.

// Settings are the values Reload changes.
type Settings struct {
	NamespaceRate       float64
	NamespaceBurst      int
	NamespaceBytesRate  float64
	NamespaceBytesBurst int
	RefusalRate         float64
	// AuditRefusalInterval <= 0: the default.
	AuditRefusalInterval time.Duration
	NodeToken            string
	// Limits nil: keep those this node proposes now.
	Limits *fsm.Limits
}

// reloadState is what Reload changed: read through nodeToken and
// wantLimits, which fall back on Config's values.
type reloadState struct {
	nodeToken atomic.Pointer[string]
	limits    atomic.Pointer[fsm.Limits]
	// limitsChanged wakes the leader's keepLimits (buffered: one pending
	// wake-up is enough).
	limitsChanged chan struct{}
}

// Reload applies st. It does not wait for a proposal: a leader proposes
// changed limits on its own goroutine, and logs the outcome.
func (s *Server) Reload(st Settings) {
	s.nsRate.set(st.NamespaceRate, st.NamespaceBurst)
	s.nsBytes.set(st.NamespaceBytesRate, st.NamespaceBytesBurst)
	s.refusal.set(st.RefusalRate, int(st.RefusalRate))
	s.refusals.setInterval(st.AuditRefusalInterval)
	token := st.NodeToken
	s.reload.nodeToken.Store(&token)
	if st.Limits != nil {
		l := *st.Limits
		s.reload.limits.Store(&l)
		select {
		case s.reload.limitsChanged <- struct{}{}:
		default:
		}
	}
}

// nodeToken is the credential this node presents to the others ("": none).
func (s *Server) nodeToken() string {
	if t := s.reload.nodeToken.Load(); t != nil {
		return *t
	}
	return s.cfg.NodeToken
}

// wantLimits are the replicated limits this node proposes when it leads
// (nil: none of its own).
func (s *Server) wantLimits() *fsm.Limits {
	if l := s.reload.limits.Load(); l != nil {
		return l
	}
	return s.cfg.Limits
}

// applyLimits proposes this node's limits if they differ from those in
// force (on the leader).
func (s *Server) applyLimits(ctx context.Context) {
	want := s.wantLimits()
	if want == nil || *want == s.m.Limits() {
		return
	}
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

// keepLimits runs on the leader, after lead applied its limits, until the
// term ends: each Reload that changes them proposes them again.
func (s *Server) keepLimits(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.reload.limitsChanged:
			s.applyLimits(ctx)
		}
	}
}

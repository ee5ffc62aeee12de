package server

import (
	"context"
	"crypto/rand"
	"errors"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/auth"
	"github.com/lockcluster/lockcluster/internal/rpcerr"
)

// Member-only calls (issue 24). What proves that a call comes from a
// member of the cluster is internal/auth's (member.go): the cluster secret
// (fsm/clustersecret.go), which every node sends on every call it makes to
// another (forwardContext), or a verified client certificate naming a
// member. The same rule holds with auth on and off. What only a member may
// do:
//
//   - Cluster.Touch, by which a follower forwards its clients' heartbeats
//     to the leader. A call without a member's proof is refused,
//     PermissionDenied: anyone who could call it could keep any session,
//     and the locks it holds, alive by its id after its client went
//     silent.
//   - The forwarding metadata on any call: lockcluster-forwarded (a node
//     forwarded the call: the leader neither forwards it again nor audits
//     it again) and lockcluster-admin-caller (the forwarding node's caller
//     holds an admin credential). From a caller that is not a member the
//     marks are taken off before the audit log or any handler sees them
//     (MemberOptions), and the caller's admin credential is not taken as
//     acting for anyone (adminCaller): the call is served as the caller's
//     own. Refusing it would protect nothing more, and would fail the
//     client calls that a node of the version before forwards without the
//     secret during a rolling upgrade.
//
// Every other RPC keeps its own rule, also when a node calls it: Status
// (the leader's probes), Members (a node asking whether it was removed),
// Join (also a node recording its own addresses, record_only: it grants
// nothing Join does not), Leave and SaveSnapshot (also a follower relaying
// the leader's) are cluster operations, admin-only when auth is on.
//
// A rolling upgrade from a version without the secret: a node of the
// version before sends Touch without it, and a leader of this version
// refuses it once the cluster has a secret (there is no window in which a
// secret-less Touch is accepted: it would be a stranger's as well). The
// old follower's forwarded heartbeats then go unacknowledged, and after a
// third of their TTL without an acknowledgement its clients move their
// session streams to another node, which renews them if it runs this
// version (or is the leader); with mutual TLS and node certificates that
// name their members, the old node's certificate proves it and nothing is
// refused. Upgrading the followers first and the leader last avoids the
// refusals: the secret is drawn only once a node of this version leads.

// memberState is what the member-only rule keeps on a node.
type memberState struct {
	lastHeal atomic.Int64 // unix ns: the last time the secret was proposed again
	lastWarn atomic.Int64 // unix ns: the last warning that the leader refused this node's Touch
	// openWarned: memberOnly has warned that it lets calls through while
	// no secret is drawn.
	openWarned atomic.Bool
}

// unprovenKey is the context key of a call whose forwarding marks were
// taken off (unmark).
type unprovenKey struct{}

// clusterSecretBytes is the length of the secret a leader draws.
const clusterSecretBytes = 32

// secretHealInterval is how often at most the leader proposes its secret
// again for a member that calls without one (see healSecret).
const secretHealInterval = 10 * time.Second

// fromMember reports whether the call ctx proves it comes from a member.
func (s *Server) fromMember(ctx context.Context) bool {
	return auth.FromMember(ctx, s.dir.ClusterSecret(), s.namesMember)
}

// namesMember reports whether a certificate identity is a member's: a node
// identity auth knows (its admin identities), or the id of a member in
// the member directory or in raft's configuration.
func (s *Server) namesMember(id string) bool {
	if id == "" {
		return false
	}
	if s.cfg.NodeIdentity != nil && s.cfg.NodeIdentity(id) {
		return true
	}
	if _, ok := s.members.record(id); ok {
		return true
	}
	if r := s.replica(); r != nil {
		if conf, err := r.Members(); err == nil && inConfiguration(conf, id) {
			return true
		}
	}
	return false
}

// memberOnly refuses a call to method that does not come from a member.
//
// Until the cluster secret is drawn (the cluster's level is below
// fsm.LevelClusterSecret: during an upgrade from the release before, a
// member runs it, or has not been heard from in this term; a cluster this
// release created draws it in its first term, whoever is down: level.go's
// levelFloor), a call without a member certificate cannot prove anything,
// and it is let through as the previous release let it: refusing it would
// refuse every follower's forwarded heartbeats for as long as one member
// stays down or old. The secret closes that as soon as it is drawn.
func (s *Server) memberOnly(ctx context.Context, method string) error {
	if s.fromMember(ctx) {
		return nil
	}
	if s.dir.ClusterSecret() == "" {
		if s.member.openWarned.CompareAndSwap(false, true) {
			s.log.Warn("the cluster secret is not drawn yet (a member runs an older release or has not been heard from): member-only calls are accepted from any caller until it is", "method", method)
		}
		return nil
	}
	s.healSecret(ctx)
	return rpcerr.PermissionDenied(method + " is for the cluster's own nodes: the call carries neither the cluster secret nor a client certificate that names a member")
}

// healSecret proposes the cluster secret again, at most every
// secretHealInterval, when this node leads and a call that would need it
// came without any: a member whose state lacks it (a node upgraded from a
// version that skipped the entry and compacted it away; see
// fsm/clustersecret.go) then gets it; every other member already has it,
// and the entry changes nothing there.
func (s *Server) healSecret(ctx context.Context) {
	secret := s.dir.ClusterSecret()
	r := s.replica()
	if s.cfg.Group != 0 || secret == "" || auth.PresentsMemberSecret(ctx) || r == nil || !r.IsLeader() {
		return
	}
	now, last := s.cfg.Now().UnixNano(), s.member.lastHeal.Load()
	if now-last < int64(secretHealInterval) || !s.member.lastHeal.CompareAndSwap(last, now) {
		return
	}
	go func() {
		pctx, cancel := context.WithTimeout(context.Background(), rpcForwardTimeout)
		defer cancel()
		if _, _, err := s.propose(pctx, &fsm.SetClusterSecret{Secret: secret}); err != nil {
			s.log.Debug("proposing the cluster secret again failed", "error", err)
		}
	}()
}

// drawClusterSecret draws the cluster secret when the state has none (the
// first leader of a cluster, of a cluster restored from a backup, or the
// first of this version). It decides on the state after a read barrier,
// which holds every secret committed in an earlier term; should two be
// drawn anyway, the first applied wins everywhere (fsm).
func (s *Server) drawClusterSecret(ctx context.Context) error {
	if s.dir.ClusterSecret() != "" {
		return nil
	}
	if err := s.gateLevel(&fsm.SetClusterSecret{}); err != nil { // level.go
		return err
	}
	r := s.replica()
	if r == nil {
		return errors.New("node is starting")
	}
	if err := r.ReadBarrier(ctx); err != nil {
		return err
	}
	if s.dir.ClusterSecret() != "" {
		return nil
	}
	b := make([]byte, clusterSecretBytes)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	ap, _, err := s.propose(ctx, &fsm.SetClusterSecret{Secret: string(b)})
	if err == nil {
		err = ap.Result.Err
	}
	if err == nil {
		s.log.Info("drew the cluster secret: the nodes' calls to each other carry it from now on")
	}
	return err
}

// keepDrawing retries drawClusterSecret until it succeeds or ctx (the
// term) ends: after every probe round while the cluster's protocol level
// is below the secret's (a member runs the release before, or has not
// answered yet: level.go), every second after another failure.
func (s *Server) keepDrawing(ctx context.Context, err error) {
	said := "" // what the last log line said of the wait
	for err != nil && ctx.Err() == nil {
		if le := (*levelError)(nil); errors.As(err, &le) {
			if now := le.lowest + ": " + le.why; now != said {
				s.log.Info("the cluster secret waits for the cluster's protocol level", "needed_level", le.need, "cluster_level", le.level, "lowest_member", le.lowest, "why", le.why)
				said = now
			}
			select {
			case <-ctx.Done():
				return
			case <-s.levels.wait():
			}
		} else {
			s.log.Warn("drawing the cluster secret failed; retrying", "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		err = s.drawClusterSecret(ctx)
	}
}

// warnRefused logs, at most once a minute, that the leader refused this
// node's forwarded heartbeats as a non-member's.
func (s *Server) warnRefused(err error) {
	now, last := s.cfg.Now().UnixNano(), s.member.lastWarn.Load()
	if now-last < int64(time.Minute) || !s.member.lastWarn.CompareAndSwap(last, now) {
		return
	}
	s.log.Warn("the leader refused this node's forwarded heartbeats as a non-member's: this node has no cluster secret yet, or another; its clients' sessions are renewed through other nodes", "error", err)
}

// MemberOptions are the interceptors that take the forwarding marks off a
// call that does not come from a member (see the top of this file). Pass
// them before every other interceptor that reads the marks: the audit
// log's (AuditOptions) among them.
func (s *Server) MemberOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(s.unmarkUnary), grpc.ChainStreamInterceptor(s.unmarkStream)}
}

func (s *Server) unmarkUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(s.unmark(ctx), req)
}

func (s *Server) unmarkStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if ctx := s.unmark(ss.Context()); ctx != ss.Context() {
		ss = &unmarkedStream{ServerStream: ss, ctx: ctx}
	}
	return h(srv, ss)
}

type unmarkedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (u *unmarkedStream) Context() context.Context { return u.ctx }

// unmark returns ctx without the forwarding marks, and noted as a
// non-member's, when it carries them and does not come from a member;
// ctx itself otherwise.
func (s *Server) unmark(ctx context.Context) context.Context {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok || len(md.Get(forwardedKey)) == 0 && len(md.Get(adminKey)) == 0 || s.fromMember(ctx) {
		return ctx
	}
	md = md.Copy()
	md.Delete(forwardedKey)
	md.Delete(adminKey)
	return context.WithValue(metadata.NewIncomingContext(ctx, md), unprovenKey{}, true)
}

// unprovenRelay reports whether ctx is a call whose forwarding marks were
// taken off: whatever credential it carries is its own caller's, and
// acts for nobody else.
func unprovenRelay(ctx context.Context) bool {
	v, _ := ctx.Value(unprovenKey{}).(bool)
	return v
}

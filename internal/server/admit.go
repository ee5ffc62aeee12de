package server

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/raftnode"
)

// What is refused before the log (SPEC §9: bad input never reaches the
// log). Every write first passes the gate: the command's admission class
// (fsm/admission.go: a type the table lacks, or one only a node proposes,
// is refused), the replicated limits, the session's secret (a session is a
// capability: SPEC §10), the refusals the applied state makes certain
// (sessions per namespace, pending per session, a release of a request id
// the session has no record of, after a read barrier), the per-session and
// per-namespace write rates (entries and bytes, decided on the node the
// client called: quota.go); then copies of one (session, request id) that
// arrive together propose once. The FSM keeps its own checks: a request
// can race with the entries before it.

// adminKey carries, on a forwarded call, that the original caller holds an
// admin credential. It is trusted only from a caller that holds one itself
// (a node).
const adminKey = "lockcluster-admin-caller"

// adminCaller reports whether the call's caller holds an admin credential
// (never with auth off; never for a call marked forwarded by a caller that
// is not a member: member.go).
func (s *Server) adminCaller(ctx context.Context) bool {
	if s.cfg.IsAdmin == nil || !s.cfg.IsAdmin(ctx) || unprovenRelay(ctx) {
		return false
	}
	if !isForwarded(ctx) {
		return true
	}
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(adminKey)
	return len(v) == 1 && v[0] == "1"
}

// checkSecret decides whether the caller may act for session id in ns.
// It returns nil, a refusal (a status error), or an error that says this
// node's state is not new enough to decide and it is not the leader
// (errors.Is raftnode.ErrNotLeader): the caller forwards then.
func (s *Server) checkSecret(ctx context.Context, id uint64, ns string, secret []byte) error {
	err := s.m.CheckSession(id, ns, secret)
	if err == nil || err.Code == fsm.CodeSessionClosed || s.m.SessionKnown(id) {
		return errOrNil(err)
	}
	// Not known here: this node may be behind the caller. Catch up with
	// everything committed (a read barrier on the leader), then decide.
	node := s.replica()
	if node == nil {
		return toStatus(raftnode.ErrShutdown)
	}
	if rerr := node.ReadBarrier(ctx); rerr != nil {
		return rerr
	}
	return errOrNil(s.m.CheckSession(id, ns, secret))
}

func errOrNil(err *fsm.Error) error {
	if err == nil {
		return nil
	}
	return toStatus(err)
}

// admit is the gate. A nil error lets cmd go to the log; an error that is
// errors.Is raftnode.ErrNotLeader sends the call to the leader; any other
// is the answer. Which commands need a session's secret is the fsm's
// admission table's to say, by the command's type; a type it lacks is
// refused (Internal), never admitted.
func (s *Server) admit(ctx context.Context, cmd fsm.Command, secret []byte) error {
	adm, err := fsm.AdmissionOf(cmd)
	if err != nil {
		return toStatus(err)
	}
	id, idNS, scoped := adm.Session(cmd)
	switch {
	case adm.Class == fsm.SessionSecret && !scoped:
		return toStatus(fmt.Errorf("internal error: %T acts for a session but names none: refused", cmd))
	case adm.Class == fsm.NodeOnly:
		return toStatus(fmt.Errorf("internal error: %T is proposed only by a node, never for a client (%s): refused", cmd, adm.Reason))
	case adm.Class != fsm.SessionSecret && adm.Class != fsm.Exempt:
		return toStatus(fmt.Errorf("internal error: %T has admission class %s, which the gate does not know: refused", cmd, adm.Class))
	}
	ns := namespaceOf(cmd)
	if err := s.m.Limits().Check(cmd); err != nil {
		return s.refusedBy(ns, RefusedSize, toStatus(err))
	}
	if scoped {
		// An admin may act without the secret; audit.go logs it.
		adminActs := adm.AdminMay && len(secret) == 0 && s.adminCaller(ctx)
		if !adminActs {
			if err := s.checkSecret(ctx, id, idNS, secret); err != nil {
				return s.refusedBy(ns, RefusedSessionSecret, err)
			}
		}
	}
	perr := s.m.Precheck(cmd)
	rated := false
	if perr != nil && releaseLike(cmd) {
		// A release (or record write) of a request id this node has no
		// record of: final only once the node holds every entry the
		// caller may have seen (precheckRelease). The read barrier is
		// charged to the session's write rate, as the entry it saves
		// would have been.
		if err := s.sessionRate(ns, id); err != nil {
			return err
		}
		rated = true
		var err error
		if perr, err = s.precheckRelease(ctx, cmd); err != nil {
			return err
		}
	}
	if perr != nil {
		reason := RefusedPending
		if _, open := cmd.(*fsm.OpenSession); open {
			reason = RefusedSessions
		}
		return s.refusedBy(ns, reason, toStatus(perr))
	}
	if scoped && !rated {
		if err := s.sessionRate(ns, id); err != nil {
			return err
		}
	}
	// On every node, a follower too: see quota.go for why a follower's
	// refusal is never wrong.
	return s.takeQuota(cmd)
}

// sessionRate takes one write of session id (of namespace ns) from its
// rate on this node, or refuses it.
func (s *Server) sessionRate(ns string, id uint64) error {
	if s.rate.allow(id, s.cfg.Now()) {
		return nil
	}
	s.refused(ns, RefusedSessionRate)
	return toStatus(&fsm.Error{Code: fsm.CodeLimit,
		Msg: fmt.Sprintf("session %d is over the request rate limit of %g per second (burst %g): slow down", id, s.rate.rate, s.rate.burst)})
}

// precheckRelease decides Precheck's refusal of a release of a request id
// that this node's state has no record of once the state is new enough:
// the request may be one the caller has seen granted (its answer came
// from the leader) that this node has not applied yet (a lagging
// follower, a new leader). After a read barrier every entry committed
// before the call is applied, so the refusal, if it stands, is the one
// Apply would give (a request still in flight is ordered after the
// release). It returns Precheck's answer then, or the barrier's error
// (errors.Is raftnode.ErrNotLeader on a follower: the caller forwards).
func (s *Server) precheckRelease(ctx context.Context, c fsm.Command) (*fsm.Error, error) {
	node := s.replica()
	if node == nil {
		return nil, toStatus(raftnode.ErrShutdown)
	}
	if err := node.ReadBarrier(ctx); err != nil {
		return nil, err
	}
	return s.m.Precheck(c), nil
}

// releaseLike reports whether cmd acts on a request the caller was
// granted, which a lagging node may not know yet: a release, or a record
// write under a grant.
func releaseLike(cmd fsm.Command) bool {
	switch cmd.(type) {
	case *fsm.Release, *fsm.SetRecord:
		return true
	}
	return false
}

// pace waits before a limit refusal of namespace ns once the namespace is
// refused more than Config.RefusalRate times a second on this node: a
// flood of calls over a limit then waits (a timer, no CPU) instead of
// spinning the node, and every caller still gets its answer.
func (s *Server) pace(ctx context.Context, ns string) {
	d := s.refusal.delay(ns, s.cfg.Now(), time.Second)
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func namespaceOf(cmd fsm.Command) string {
	switch c := cmd.(type) {
	case *fsm.OpenSession:
		return c.Namespace
	case *fsm.CloseSession:
		return c.Namespace
	case *fsm.Request:
		return c.Namespace
	case *fsm.Release:
		return c.Namespace
	case *fsm.Abort:
		return c.Namespace
	case *fsm.SetRecord:
		return c.Namespace
	}
	return ""
}

// gate holds what is in flight on this node: OpenSession proposals per
// namespace (so that a burst of opens over the sessions limit cannot all
// pass the applied-state check), and the proposals of each (session,
// request id), so that copies of one request propose once.
type gate struct {
	mu      sync.Mutex
	opening map[string]int64
	// proposed is sharded by session: every request and release passes
	// it twice, and one mutex for all of them was the leader's most
	// contended lock on a 16-core machine (a convoy: each hand-off waited
	// for the next holder to be scheduled; docs/benchmarks.md, issue 27
	// phase 0).
	proposed [flightShards]flightShard
}

const flightShards = 64

type flightShard struct {
	mu sync.Mutex
	m  map[flightKey]*flight
	_  [48]byte // a cache line each
}

type flightKey struct {
	t         fsm.EntryType
	session   uint64
	requestID uint64
}

type flight struct {
	done chan struct{}
	ap   fsm.Applied
	idx  uint64
	err  error
}

func (g *gate) init() {
	g.opening = map[string]int64{}
	for i := range g.proposed {
		g.proposed[i].m = map[flightKey]*flight{}
	}
}

// flights is the shard of the proposals in flight that holds key's.
func (g *gate) flights(key flightKey) *flightShard {
	return &g.proposed[key.session%flightShards]
}

func keyOf(cmd fsm.Command) (flightKey, bool) {
	switch c := cmd.(type) {
	case *fsm.Request:
		return flightKey{c.Type(), c.Session, c.RequestID}, true
	case *fsm.Release:
		return flightKey{c.Type(), c.Session, c.RequestID}, true
	case *fsm.Abort:
		return flightKey{c.Type(), c.Session, c.RequestID}, true
	}
	return flightKey{}, false
}

// reserveOpen counts an OpenSession in flight in its namespace, or returns
// the certain refusal of one over the sessions limit, counting the opens
// in flight; call release once the proposal is done.
func (s *Server) reserveOpen(c *fsm.OpenSession) (release func(), err error) {
	lim := s.m.Limits().MaxSessionsPerNamespace
	if lim <= 0 {
		return func() {}, nil
	}
	g := &s.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	n := s.m.SessionsIn(c.Namespace) + g.opening[c.Namespace]
	if n >= lim {
		s.refused(c.Namespace, RefusedSessions)
		return nil, toStatus(&fsm.Error{Code: fsm.CodeLimit,
			Msg: fmt.Sprintf("namespace %s has %d sessions (open or opening), the limit", strconv.Quote(c.Namespace), n)})
	}
	g.opening[c.Namespace]++
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.opening[c.Namespace]--; g.opening[c.Namespace] <= 0 {
			delete(g.opening, c.Namespace)
		}
	}, nil
}

// proposeOnce proposes cmd, unless a proposal of the same (session,
// request id) is in flight on this node: then it waits for that one's
// outcome (the FSM would answer the copy as a duplicate anyway).
func (s *Server) proposeOnce(ctx context.Context, cmd fsm.Command) (fsm.Applied, uint64, error) {
	if o, ok := cmd.(*fsm.OpenSession); ok {
		release, err := s.reserveOpen(o)
		if err != nil {
			return fsm.Applied{}, 0, err
		}
		defer release()
		return s.propose(ctx, cmd)
	}
	key, ok := keyOf(cmd)
	if !ok {
		return s.propose(ctx, cmd)
	}
	// A retry of a request the leader has applied is answered from its
	// state, as Apply would answer the copy.
	if r, isReq := cmd.(*fsm.Request); isReq {
		if node := s.replica(); node != nil && node.IsLeader() {
			if res, known := s.m.Outcome(r.Session, r.Namespace, r.RequestID); known {
				return fsm.Applied{Result: res}, s.m.LastLogical(), nil
			}
		}
	}
	g := s.gate.flights(key)
	g.mu.Lock()
	if f := g.m[key]; f != nil {
		g.mu.Unlock()
		select {
		case <-f.done:
			return f.ap, f.idx, f.err
		case <-ctx.Done():
			return fsm.Applied{}, 0, fmt.Errorf("%w: waiting for the same request's proposal: %v", raftnode.ErrOutcomeUnknown, ctx.Err())
		}
	}
	f := &flight{done: make(chan struct{})}
	g.m[key] = f
	g.mu.Unlock()
	f.ap, f.idx, f.err = s.propose(ctx, cmd)
	g.mu.Lock()
	delete(g.m, key)
	g.mu.Unlock()
	close(f.done)
	return f.ap, f.idx, f.err
}

package server

import (
	"context"
	"strings"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/auth"
	"github.com/lockcluster/lockcluster/internal/logsafe"
)

// The audit log: one structured line, on the logger named "audit", for
//
//   - every steal (event=steal): a lock request with steal that was granted;
//   - every release, abort, record write or session close made with an
//     admin credential when auth is on (event=admin-release, admin-abort,
//     admin-set-record, admin-close);
//   - every refused credential (event=refused-credential): a call or a
//     session stream answered Unauthenticated or PermissionDenied, whether
//     auth refused the namespace or the handler refused the session's
//     credential.
//
// Each line names the method, the namespace, the session and, when this
// node knows the session, its client label and client id; and the caller:
// its address, the kind of credential it presented (bearer token, client
// certificate, none) and its certificate identities. Never a token, a
// secret or any other credential's value.
//
// What a caller chose (namespace, names, label, client id, identities, a
// refusal's message) is written bounded and escaped (logsafe.String): at
// most 128 bytes of it, then how many bytes were cut, on one line. Refused
// credentials are paced per peer (auditpace.go): a flood of them makes a
// few lines and a count per interval, not a line each.
//
// A call is audited on the node the client called. A node that forwards a
// call to the leader audits it there and then; the leader does not audit
// the forwarded copy again (it would only see the forwarding node as the
// caller).

// auditMaxNames bounds the names a steal's line lists.
const auditMaxNames = 8

// AuditOptions are the interceptors that write the audit log to the
// Server's logger, named "audit". Config.IsAdmin says whether a call
// carries an admin credential; nil when auth is off (then nobody is an
// admin and no credential is refused). Pass them after the metrics interceptors and
// before auth, so that auth's refusals pass through them.
func (s *Server) AuditOptions() []grpc.ServerOption {
	a := &auditor{s: s, log: s.log.Named("audit"), admin: s.cfg.IsAdmin}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(a.unary), grpc.ChainStreamInterceptor(a.stream)}
}

type auditor struct {
	s     *Server
	log   hclog.Logger
	admin func(context.Context) bool
}

// forwarded reports whether another node forwarded the call (and so
// audited it): a call marked forwarded and, when auth is on, made with an
// admin credential, as the nodes' calls are.
func (a *auditor) forwarded(ctx context.Context) bool {
	return isForwarded(ctx) && (a.admin == nil || a.admin(ctx))
}

func (a *auditor) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	// A closed session is gone from the state when the call returns: read
	// who it was first.
	var closing []any
	if r, ok := req.(*pb.CloseSessionRequest); ok {
		closing = a.sessionArgs(r.Namespace, r.SessionId)
	}
	resp, err := h(ctx, req)
	if refused(err) {
		a.refusal(ctx, info.FullMethod, req, err)
		return resp, err
	}
	if err != nil {
		return resp, err
	}
	switch r := req.(type) {
	case *pb.LockRequest:
		if lr, ok := resp.(*pb.LockResponse); ok && r.Steal && lr.GetStatus() == pb.Status_STATUS_GRANTED && !lr.GetDuplicate() {
			names := r.Names
			if len(names) > auditMaxNames {
				names = names[:auditMaxNames]
			}
			names = logsafe.Strings(names)
			a.write(ctx, "steal", info.FullMethod, r.Namespace, r.SessionId,
				"request", r.RequestId, "names", names, "name_count", len(r.Names), "token", lr.GetToken(), "admin", a.isAdmin(ctx))
		}
	case *pb.ReleaseRequest:
		if a.isAdmin(ctx) {
			a.write(ctx, "admin-release", info.FullMethod, r.Namespace, r.SessionId, "request", r.RequestId)
		}
	case *pb.SetRecordRequest:
		if a.isAdmin(ctx) {
			a.write(ctx, "admin-set-record", info.FullMethod, r.Namespace, r.SessionId, "request", r.RequestId,
				"name", logsafe.String(r.Name), "delete", r.Delete, "release", r.Release)
		}
	case *pb.AbortRequest:
		if a.isAdmin(ctx) {
			a.write(ctx, "admin-abort", info.FullMethod, r.Namespace, r.SessionId, "request", r.RequestId)
		}
	case *pb.CloseSessionRequest:
		if a.isAdmin(ctx) {
			a.write(ctx, "admin-close", info.FullMethod, r.Namespace, 0, append(closing, "session", r.SessionId)...)
		}
	}
	return resp, err
}

func (a *auditor) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	w := &auditedStream{ServerStream: ss}
	err := h(srv, w)
	if refused(err) {
		a.refusal(ss.Context(), info.FullMethod, w.first, err)
	}
	return err
}

// auditedStream keeps a stream's first message: a session stream's attach
// names the namespace and session a refusal is about.
type auditedStream struct {
	grpc.ServerStream
	first any
}

func (s *auditedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if s.first == nil && err == nil {
		if up, ok := m.(*pb.SessionUp); ok && up.GetAttach() != nil {
			s.first = up.GetAttach()
		} else {
			s.first = m
		}
	}
	return err
}

func refused(err error) bool {
	c := status.Code(err)
	return c == codes.Unauthenticated || c == codes.PermissionDenied
}

func (a *auditor) isAdmin(ctx context.Context) bool { return a.admin != nil && a.admin(ctx) }

// Why a call was refused, for the metrics: auth's reasons, and a session
// secret that was refused.
const reasonSessionSecret = "session_secret"

// RefusalReasons are every reason Observer.Refused is told.
var RefusalReasons = []string{auth.ReasonNoCredential, auth.ReasonNamespace, auth.ReasonAdmin, reasonSessionSecret}

// refusalReason is why err refused a call: auth's reason when auth refused
// it; otherwise a refused session secret (what the handlers refuse), or no
// credential for an Unauthenticated one.
func refusalReason(err error) string {
	if r := auth.RefusalReason(err); r != "" {
		return r
	}
	if status.Code(err) == codes.Unauthenticated {
		return auth.ReasonNoCredential
	}
	return reasonSessionSecret
}

// auditReasonBytes bounds a refusal's message in the log: it may quote the
// caller's namespace, itself bounded.
const auditReasonBytes = 512

func (a *auditor) refusal(ctx context.Context, method string, req any, err error) {
	if a.forwarded(ctx) {
		return // the node the client called counted and audited it
	}
	a.s.cfg.Observer.Refused(refusalReason(err))
	var ns string
	var session uint64
	if r, ok := req.(interface{ GetNamespace() string }); ok {
		ns = r.GetNamespace()
	}
	if r, ok := req.(interface{ GetSessionId() uint64 }); ok {
		session = r.GetSessionId()
	}
	if auth.RefusalReason(err) != "" {
		a.s.refused(ns, RefusedCredential) // per namespace too; a refused session secret the gate counts itself
	}
	code, reason := status.Code(err).String(), logsafe.Bound(status.Convert(err).Message(), auditReasonBytes)
	addr := peerAddr(ctx)
	if !a.s.refusals.admit(a.s.cfg.Now(), addr, refusalSample{method: method, namespace: logsafe.String(ns), code: code, reason: reason, peer: addr}) {
		return // counted: the peer's summary line tells of it
	}
	a.write(ctx, "refused-credential", method, ns, session, "code", code, "reason", reason)
}

// write logs one audit line: what, where, who, then the event's own pairs;
// nothing for a call another node forwarded (it logged the line).
func (a *auditor) write(ctx context.Context, event, method, ns string, session uint64, kv ...any) {
	if a.forwarded(ctx) {
		return
	}
	args := []any{"event", event, "method", method, "namespace", logsafe.String(ns)}
	if session != 0 {
		args = append(args, "session", session)
		args = append(args, a.sessionArgs(ns, session)...)
	}
	args = append(args, callerArgs(ctx)...)
	a.log.Info("audit", append(args, kv...)...)
}

// sessionArgs name a session by its client's label and id, when this node
// knows it in namespace ns.
func (a *auditor) sessionArgs(ns string, session uint64) []any {
	if info, ok := a.s.m.Session(session); ok && info.Namespace == ns {
		return []any{"client_label", logsafe.String(info.Label), "client_id", logsafe.String(info.ClientID)}
	}
	return nil
}

// callerArgs describe who made a call, never with a credential's value.
func callerArgs(ctx context.Context) []any {
	cred := "none"
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get("authorization")) > 0 {
		cred = "bearer token"
	}
	var ids []string
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			if ids = auth.Identities(&ti.State); len(ids) > 0 && cred == "none" {
				cred = "client certificate"
			}
		}
	}
	return []any{"peer", peerAddr(ctx), "credential", cred, "identities", logsafe.Bound(strings.Join(ids, ","), auditIdentityBytes)}
}

// auditIdentityBytes bounds a caller's certificate identities in a line.
const auditIdentityBytes = 512

// peerAddr is the caller's address ("" when unknown).
func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

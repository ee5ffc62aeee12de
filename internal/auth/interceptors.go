package auth

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/logsafe"
	"github.com/lockcluster/lockcluster/internal/rpcerr"
)

// namespaced is every request message that names a namespace.
type namespaced interface{ GetNamespace() string }

// Open methods need no credential: health checks and server reflection.
func open(method string) bool {
	return strings.HasPrefix(method, "/grpc.health.v1.") || strings.HasPrefix(method, "/grpc.reflection.")
}

func (a *Authorizer) check(ctx context.Context, method string, req any) error {
	if !a.Enabled() || open(method) {
		return nil
	}
	c := CallerOf(ctx)
	if c.anonymous() {
		return &refusal{ReasonNoCredential, rpcerr.Unauthenticated("lockcluster requires credentials: a bearer token (LOCKCLUSTER_TOKEN) or a client certificate")}
	}
	if n, ok := req.(namespaced); ok {
		if !a.namespace(c, n.GetNamespace()) {
			// The name is the caller's, maybe a megabyte: the message (the
			// client's and the audit log's) quotes its start.
			ns := strconv.Quote(logsafe.Clip(n.GetNamespace(), logsafe.Max))
			return &refusal{ReasonNamespace, rpcerr.PermissionDenied("the credentials do not grant namespace " + ns)}
		}
		return nil
	}
	if !a.Admin(c) {
		return &refusal{ReasonAdmin, rpcerr.PermissionDenied("cluster operations need an admin credential")}
	}
	return nil
}

// Why auth refused a call (RefusalReason).
const (
	ReasonNoCredential = "no_credential" // none presented: Unauthenticated
	ReasonNamespace    = "namespace"     // the namespace is not granted
	ReasonAdmin        = "admin"         // a cluster operation without an admin credential
)

// refusal is auth's answer to a call it refuses: the status error, and why.
type refusal struct {
	reason string
	err    error
}

func (r *refusal) Error() string              { return r.err.Error() }
func (r *refusal) GRPCStatus() *status.Status { return status.Convert(r.err) }

// RefusalReason says why auth refused the call that err answers
// (ReasonNoCredential, ReasonNamespace, ReasonAdmin), or "" when auth did
// not refuse it.
func RefusalReason(err error) string {
	var r *refusal
	if errors.As(err, &r) {
		return r.reason
	}
	return ""
}

// Unary checks every unary call.
func (a *Authorizer) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := a.check(ctx, info.FullMethod, req); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}

// Stream checks the first message of every stream (the session stream's
// attach names its namespace); a stream must not carry other namespaces'
// messages after it, which the session stream cannot.
func (a *Authorizer) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if !a.Enabled() || open(info.FullMethod) {
			return h(srv, ss)
		}
		return h(srv, &checked{ServerStream: ss, a: a, method: info.FullMethod})
	}
}

type checked struct {
	grpc.ServerStream
	a      *Authorizer
	method string
	done   bool
}

func (c *checked) RecvMsg(m any) error {
	if err := c.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if c.done {
		return nil
	}
	c.done = true
	var req any = m
	if up, ok := m.(*pb.SessionUp); ok {
		req = up.GetAttach()
		if up.GetAttach() == nil {
			return rpcerr.Invalid("the first message of a session stream must be an attach")
		}
	}
	return c.a.check(c.Context(), c.method, req)
}

package auth

import (
	"context"
	"strconv"
	"strings"

	"google.golang.org/grpc"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
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
		return rpcerr.Unauthenticated("lockcluster requires credentials: a bearer token (LOCKCLUSTER_TOKEN) or a client certificate")
	}
	if n, ok := req.(namespaced); ok {
		if !a.namespace(c, n.GetNamespace()) {
			return rpcerr.PermissionDenied("the credentials do not grant namespace " + strconv.Quote(n.GetNamespace()))
		}
		return nil
	}
	if !a.Admin(c) {
		return rpcerr.PermissionDenied("cluster operations need an admin credential")
	}
	return nil
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

package auth

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// Each refusal says why (RefusalReason) and is the status it was; one that
// names a megabyte namespace quotes only its start (issue 24).
func TestRefusalReasons(t *testing.T) {
	a, err := New(Config{AdminTokens: []string{"admin-token-0123456789"}, Namespaces: map[string]Namespace{"ns": {Tokens: []string{"user-token-0123456789"}}}})
	if err != nil {
		t.Fatal(err)
	}
	call := func(token, method string, req any) error {
		ctx := context.Background()
		if token != "" {
			ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+token))
		}
		_, err := a.Unary()(ctx, req, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) { return nil, nil })
		return err
	}
	huge := strings.Repeat("n", 1<<20)
	for _, tc := range []struct {
		err    error
		code   codes.Code
		reason string
	}{
		{call("", "/lockcluster.v1.Locks/Query", &pb.QueryRequest{Namespace: "ns"}), codes.Unauthenticated, ReasonNoCredential},
		{call("user-token-0123456789", "/lockcluster.v1.Locks/Query", &pb.QueryRequest{Namespace: huge}), codes.PermissionDenied, ReasonNamespace},
		{call("user-token-0123456789", "/lockcluster.v1.Cluster/Members", &pb.MembersRequest{}), codes.PermissionDenied, ReasonAdmin},
		{call("user-token-0123456789", "/lockcluster.v1.Cluster/Promote", &pb.PromoteRequest{Id: "node3"}), codes.PermissionDenied, ReasonAdmin},
		{call("user-token-0123456789", "/lockcluster.v1.Locks/Query", &pb.QueryRequest{Namespace: "ns"}), codes.OK, ""},
	} {
		if status.Code(tc.err) != tc.code || RefusalReason(tc.err) != tc.reason {
			t.Errorf("%v: code %s reason %q, want %s %q", tc.err, status.Code(tc.err), RefusalReason(tc.err), tc.code, tc.reason)
		}
		if len(status.Convert(tc.err).Message()) > 300 {
			t.Errorf("a refusal's message of %d bytes", len(status.Convert(tc.err).Message()))
		}
	}
	if RefusalReason(status.Error(codes.PermissionDenied, "not auth's")) != "" {
		t.Error("RefusalReason of another refusal is not empty")
	}
}

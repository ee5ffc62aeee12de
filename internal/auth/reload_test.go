package auth

import (
	"context"
	"errors"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

const (
	reloadAdmin  = "admin-token-0123456789"
	reloadAdmin2 = "admin-token-9876543210"
	reloadOld    = "old-token-0123456789"
	reloadNew    = "new-token-0123456789"
)

// Credentials change with Prepare and Swap: a token added works, one
// removed is refused, the admin token the node presents follows; Prepare
// alone changes nothing, and refuses what is invalid or would turn auth
// on or off.
func TestReloadCredentials(t *testing.T) {
	a, err := New(Config{AdminTokens: []string{reloadAdmin}, Namespaces: map[string]Namespace{"a": {Tokens: []string{reloadOld}}}})
	if err != nil {
		t.Fatal(err)
	}
	query := func(token, ns string) codes.Code {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+token))
		_, err := a.Unary()(ctx, &pb.QueryRequest{Namespace: ns}, &grpc.UnaryServerInfo{FullMethod: "/lockcluster.v1.Locks/Query"},
			func(context.Context, any) (any, error) { return nil, nil })
		return status.Code(err)
	}
	if query(reloadOld, "a") != codes.OK || query(reloadNew, "a") != codes.PermissionDenied {
		t.Fatal("before the reload")
	}
	next, err := a.Prepare(Config{AdminTokens: []string{reloadAdmin2, reloadAdmin}, Namespaces: map[string]Namespace{"a": {Tokens: []string{reloadNew}}, "b": {Tokens: []string{reloadOld}}}})
	if err != nil {
		t.Fatal(err)
	}
	if query(reloadOld, "a") != codes.OK || a.NodeToken() != reloadAdmin {
		t.Fatal("Prepare changed the credentials in force")
	}
	a.Swap(next)
	for _, c := range []struct {
		token, ns string
		want      codes.Code
	}{
		{reloadNew, "a", codes.OK},
		{reloadOld, "a", codes.PermissionDenied},
		{reloadOld, "b", codes.OK},
		{reloadAdmin, "a", codes.OK},
		{reloadAdmin2, "b", codes.OK},
	} {
		if got := query(c.token, c.ns); got != c.want {
			t.Errorf("namespace %s with %s after the reload: %s, want %s", c.ns, c.token, got, c.want)
		}
	}
	if a.NodeToken() != reloadAdmin2 {
		t.Error("the node token is not the new first admin token")
	}
	if _, err := a.Prepare(Config{}); !errors.Is(err, ErrToggle) {
		t.Errorf("turning auth off: %v, want ErrToggle", err)
	}
	if _, err := a.Prepare(Config{AdminTokens: []string{"short"}}); err == nil || errors.Is(err, ErrToggle) {
		t.Errorf("a short admin token: %v", err)
	}
	off, _ := New(Config{})
	if _, err := off.Prepare(Config{AdminTokens: []string{reloadAdmin}}); !errors.Is(err, ErrToggle) {
		t.Errorf("turning auth on: %v, want ErrToggle", err)
	}
	if !off.Admin(Caller{}) {
		t.Error("auth off no longer allows everything")
	}
}

// Checks run while the table is swapped (go test -race).
func TestReloadWhileChecking(t *testing.T) {
	a, err := New(Config{AdminTokens: []string{reloadAdmin}, AdminIdentities: []string{"node0"}, Namespaces: map[string]Namespace{"a": {Tokens: []string{reloadOld}}}})
	if err != nil {
		t.Fatal(err)
	}
	tables := make([]*Table, 2)
	for i, tok := range []string{reloadOld, reloadNew} {
		if tables[i], err = a.Prepare(Config{AdminTokens: []string{reloadAdmin}, AdminIdentities: []string{"node0"}, Namespaces: map[string]Namespace{"a": {Tokens: []string{tok}}}}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 200 {
			a.Swap(tables[i%2])
		}
	}()
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+reloadAdmin))
	for range 200 {
		if !a.namespace(CallerOf(ctx), "a") || !a.NodeIdentity("node0") || a.NodeToken() != reloadAdmin {
			t.Fatal("the admin lost its rights during a swap")
		}
	}
	wg.Wait()
}

package lockcluster_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/lockcluster/lockcluster"
)

// grpcServer serves an empty gRPC server on a loopback port, over TLS with
// cfg or in plaintext (nil), and returns its address. A client whose TLS
// setting disagrees never gets as far as a call.
func grpcServer(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if cfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	s := grpc.NewServer(opts...)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// deadPort is a loopback address nothing listens on.
func deadPort(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// A client whose TLS setting disagrees with the node's fails Dial (and an
// admin call) with ErrTLSMismatch, naming the endpoint and the fix, well
// within a 2s context: not with a deadline error once it ends.
func TestTLSMismatchFailsFast(t *testing.T) {
	dir := tlsDir(t)
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "app.crt"), filepath.Join(dir, "app.key"))
	if err != nil {
		t.Fatal(err)
	}
	tlsAddr := grpcServer(t, &tls.Config{Certificates: []tls.Certificate{pair}})
	plainAddr := grpcServer(t, nil)
	clientTLS, err := lockcluster.TLSFiles{CA: filepath.Join(dir, "ca.crt")}.Config()
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name      string
		endpoints []string
		opts      []lockcluster.Option
		want      []string
	}{
		{"plaintext client, TLS node", []string{tlsAddr}, nil,
			[]string{"TLS mismatch", "the node at " + tlsAddr + " speaks TLS", "--cacert"}},
		{"TLS client, plaintext node", []string{plainAddr}, []lockcluster.Option{lockcluster.WithTLS(clientTLS)},
			[]string{"TLS mismatch", "the node at " + plainAddr + " speaks plaintext", "drop --cacert"}},
		// An endpoint that is down does not hide the mismatch of the others.
		{"plaintext client, TLS node and a dead one", []string{deadPort(t), tlsAddr}, nil,
			[]string{"TLS mismatch", tlsAddr + " speaks TLS"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			c, err := lockcluster.Dial(ctx, tc.endpoints, tc.opts...)
			if err == nil {
				c.Close(ctx)
				t.Fatal("Dial succeeded")
			}
			checkMismatch(t, ctx, "Dial", err, tc.want)

			a, err := lockcluster.DialAdmin(tc.endpoints, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			actx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err = a.Members(actx)
			checkMismatch(t, actx, "Members", err, tc.want)
		})
	}
}

func checkMismatch(t *testing.T, ctx context.Context, what string, err error, want []string) {
	t.Helper()
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s waited out its context: %v", what, err)
	}
	if !errors.Is(err, lockcluster.ErrTLSMismatch) || !errors.Is(err, lockcluster.ErrUnavailable) {
		t.Fatalf("%s: %v: want ErrTLSMismatch (and ErrUnavailable)", what, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("%s: no %q in %q", what, w, err)
		}
	}
}

// An endpoint that is merely down is no TLS mismatch: Dial waits out its
// context and says unavailable.
func TestTLSMismatchNotForADeadNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := lockcluster.Dial(ctx, []string{deadPort(t)})
	if !errors.Is(err, lockcluster.ErrUnavailable) || errors.Is(err, lockcluster.ErrTLSMismatch) {
		t.Fatalf("Dial to a dead port: %v: want ErrUnavailable, no TLS mismatch", err)
	}
}

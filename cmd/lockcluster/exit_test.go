package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/lockcluster/lockcluster"
	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// Errors a user can act on: a refused credential exits 77 and says which
// kind it was; a plaintext client meets a TLS node and is told to set
// --cacert; -o json makes every message an object.
func TestActionableErrors(t *testing.T) {
	bin := binary(t)
	certs := t.TempDir()
	for _, args := range [][]string{{"ca", "create", "--dir", certs}, {"cert", "create", "node0", "--ca-dir", certs, "--hosts", "127.0.0.1,localhost"}} {
		if out, err := exec.Command(bin, append([]string{"tls"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("lockcluster tls %v: %v\n%s", args, err, out)
		}
	}
	config := filepath.Join(certs, "lockcluster.yaml")
	os.WriteFile(config, []byte(fmt.Sprintf("auth:\n  admin-tokens: [%q]\n  namespaces:\n    a:\n      tokens: [%q]\n", adminToken, tokenA)), 0o600)
	f := lockcluster.TLSFiles{CA: filepath.Join(certs, "ca.crt"), Cert: filepath.Join(certs, "node0.crt"), Key: filepath.Join(certs, "node0.key")}
	cfg, err := lockcluster.TLSFiles{CA: f.CA}.Config()
	if err != nil {
		t.Fatal(err)
	}
	pc := startProcsWith(t, 1, func(string) []string {
		return []string{"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key, "--config", config}
	}, []lockcluster.Option{lockcluster.WithTLS(cfg), lockcluster.WithToken(adminToken)})
	ca := "--cacert=" + f.CA

	check := func(t *testing.T, wantCode int, want []string, args ...string) string {
		t.Helper()
		out, code := run(t, pc, args...)
		if code != wantCode {
			t.Fatalf("%v: exit %d, want %d: %s", args, code, wantCode, out)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Fatalf("%v: no %q in: %s", args, w, out)
			}
		}
		return out
	}

	t.Run("a refused token exits 77 and names it", func(t *testing.T) {
		check(t, exitNoPerm, []string{"permission denied", "bearer token"}, "query", "-n", "a", ca, "--token", tokenA+"x")
		check(t, exitNoPerm, []string{"permission denied", "bearer token"}, "lock", "x", "-n", "a", ca, "--token", tokenA+"x", "--", "true")
		check(t, exitNoPerm, []string{"without credentials", "--token"}, "query", "-n", "a", ca)
		check(t, 0, nil, "query", "-n", "a", ca, "--token", tokenA)
	})

	t.Run("status without a credential says Unauthenticated per endpoint", func(t *testing.T) {
		out := check(t, exitNoPerm, []string{"Unauthenticated", "permission denied"}, "status", ca)
		if strings.Contains(out, "no endpoint answered") {
			t.Fatal(out)
		}
		check(t, 0, []string{"Leader"}, "status", ca, "--token", adminToken)
	})

	t.Run("a plaintext client is told the node speaks TLS", func(t *testing.T) {
		check(t, exitUnavailable, []string{"speaks TLS: set --cacert"}, "query", "-n", "a", "--token", tokenA, "--request-timeout", "3s")
		check(t, exitUnavailable, []string{"speaks TLS: set --cacert"}, "members", "--token", adminToken, "--request-timeout", "3s")
	})

	t.Run("-o json: errors, health, leave", func(t *testing.T) {
		out := check(t, exitNoPerm, nil, "query", "-n", "a", ca, "--token", "nope", "-o", "json")
		var e struct {
			Error    string
			ExitCode int
		}
		if err := json.Unmarshal([]byte(out), &e); err != nil || e.ExitCode != exitNoPerm || !strings.Contains(e.Error, "bearer token") {
			t.Fatalf("%v: %s", err, out)
		}
		out = check(t, 0, nil, "health", ca, "--token", adminToken, "-o", "json")
		var h struct {
			Endpoint string
			Serving  bool
		}
		if err := json.Unmarshal([]byte(out), &h); err != nil || !h.Serving || h.Endpoint != pc.Nodes[0].GRPC {
			t.Fatalf("%v: %s", err, out)
		}
		// Leave of a non-member fails, as one JSON object.
		out, code := run(t, pc, "leave", "node9", ca, "--token", adminToken, "-o", "json")
		var l map[string]any
		if err := json.Unmarshal([]byte(out), &l); err != nil || code == 0 || l["error"] == nil {
			t.Fatalf("leave node9: exit %d, %v: %s", code, err, out)
		}
	})
}

// A feature the cluster's protocol level does not have yet (a rolling
// upgrade in progress) exits 69, as unavailable: a cron job tries again
// later. A reserved name, which no upgrade changes, exits 64.
func TestClusterLevelExitsUnavailable(t *testing.T) {
	g := &globals{}
	level := &lockcluster.Error{Name: "NotSupportedError", Code: codes.FailedPrecondition, Reason: pb.ErrorReason_CLUSTER_LEVEL, Message: "records need protocol level 3"}
	if ex, ok := g.exit(level).(*exitError); !ok || ex.code != exitUnavailable || !strings.Contains(ex.msg, "protocol level 3") {
		t.Fatalf("CLUSTER_LEVEL: %+v", g.exit(level))
	}
	reserved := &lockcluster.Error{Name: "NotSupportedError", Code: codes.InvalidArgument, Reason: pb.ErrorReason_NOT_SUPPORTED, Message: `name "-x" is reserved`}
	if ex, ok := g.exit(reserved).(*exitError); !ok || ex.code != exitUsage {
		t.Fatalf("NOT_SUPPORTED: %+v", g.exit(reserved))
	}
}

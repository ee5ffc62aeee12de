package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
)

const (
	adminToken = "admin-0123456789abcdef-admin"
	tokenA     = "team-a-0123456789abcdef"
	tokenB     = "team-b-0123456789abcdef"
)

// A TLS cluster with two namespaces whose clients cannot see or touch each
// other's locks (README's production section, SPEC §10).
func TestTLSAndNamespaceAuth(t *testing.T) {
	bin := binary(t)
	certs := t.TempDir()
	mk := func(args ...string) {
		t.Helper()
		out, err := exec.Command(bin, append([]string{"tls"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("lockcluster tls %v: %v\n%s", args, err, out)
		}
	}
	mk("ca", "create", "--dir", certs)
	for _, n := range []string{"node0", "node1", "node2", "client-a", "stranger"} {
		mk("cert", "create", n, "--ca-dir", certs, "--hosts", "127.0.0.1,localhost")
	}
	config := filepath.Join(certs, "lockcluster.yaml")
	os.WriteFile(config, []byte(fmt.Sprintf(`auth:
  admin-tokens: [%q]
  admin-identities: [node0, node1, node2]
  namespaces:
    a:
      tokens: [%q]
      identities: [client-a]
    b:
      tokens: [%q]
`, adminToken, tokenA, tokenB)), 0o600)
	files := func(name string) lockcluster.TLSFiles {
		return lockcluster.TLSFiles{CA: filepath.Join(certs, "ca.crt"), Cert: filepath.Join(certs, name+".crt"), Key: filepath.Join(certs, name+".key")}
	}
	tlsOpt := func(name string) lockcluster.Option {
		f := files(name)
		if name == "" {
			f.Cert, f.Key = "", ""
		}
		cfg, err := f.Config()
		if err != nil {
			t.Fatal(err)
		}
		return lockcluster.WithTLS(cfg)
	}
	pc := startProcsWith(t, 3, func(id string) []string {
		f := files(id)
		return []string{"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key, "--config", config}
	}, []lockcluster.Option{tlsOpt(""), lockcluster.WithToken(adminToken)})

	// Talk to a follower first, so that writes are forwarded.
	leader := pc.leader(5 * time.Second)
	addrs := append([]string{pc.Nodes[(leader+1)%3].GRPC}, pc.addrs()...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := dialT(t, addrs, tlsOpt(""), lockcluster.WithToken(tokenA), lockcluster.WithNamespace("a"))
	b := dialT(t, addrs, tlsOpt(""), lockcluster.WithToken(tokenB), lockcluster.WithNamespace("b"))
	la, err := a.Acquire(ctx, "db", lockcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Release(ctx)
	if _, err := b.Acquire(ctx, "db", lockcluster.Options{IfAvailable: true}); err != nil {
		t.Fatalf("b's own namespace: %v", err)
	}
	qb, err := b.Query(ctx)
	if err != nil || len(qb.Held) != 1 || qb.Held[0].SessionID != b.SessionID() {
		t.Fatalf("b's query: %+v %v", qb, err)
	}

	short := func() context.Context {
		c, cancel := context.WithTimeout(ctx, 3*time.Second)
		t.Cleanup(cancel)
		return c
	}
	// b's token in namespace a, and in a namespace that does not exist: the
	// same refusal, which tells nothing about a.
	_, errA := lockcluster.Dial(short(), addrs, tlsOpt(""), lockcluster.WithToken(tokenB), lockcluster.WithNamespace("a"))
	_, errX := lockcluster.Dial(short(), addrs, tlsOpt(""), lockcluster.WithToken(tokenB), lockcluster.WithNamespace("x"))
	if !errors.Is(errA, lockcluster.ErrPermission) || !errors.Is(errX, lockcluster.ErrPermission) ||
		strings.ReplaceAll(errA.Error(), `"a"`, `"x"`) != errX.Error() {
		t.Fatalf("foreign namespace: %v / unknown namespace: %v", errA, errX)
	}
	// No credential at all.
	if _, err := lockcluster.Dial(short(), addrs, tlsOpt(""), lockcluster.WithNamespace("a")); !errors.Is(err, lockcluster.ErrPermission) {
		t.Fatalf("no credential: %v", err)
	}
	// A client certificate whose identity is granted namespace a, no token.
	viaCert := dialT(t, addrs, tlsOpt("client-a"), lockcluster.WithNamespace("a"))
	if _, err := viaCert.Acquire(ctx, "db", lockcluster.Options{IfAvailable: true}); !errors.Is(err, lockcluster.ErrNotAvailable) {
		t.Fatalf("mTLS identity in namespace a: %v", err)
	}
	if _, err := lockcluster.Dial(short(), addrs, tlsOpt("stranger"), lockcluster.WithNamespace("a")); !errors.Is(err, lockcluster.ErrPermission) {
		t.Fatalf("unknown certificate identity: %v", err)
	}
	// Plaintext against TLS nodes fails.
	if _, err := lockcluster.Dial(short(), addrs, lockcluster.WithToken(tokenA), lockcluster.WithNamespace("a")); err == nil {
		t.Fatal("a plaintext client was served")
	}
	// Cluster operations need the admin credential.
	env := append(os.Environ(), "LOCKCLUSTER_ADDR="+strings.Join(pc.addrs(), ","), "LOCKCLUSTER_CACERT="+filepath.Join(certs, "ca.crt"))
	members := func(token string) (string, int) {
		cmd := exec.Command(bin, "members")
		cmd.Env = append(env, "LOCKCLUSTER_TOKEN="+token)
		out, err := cmd.CombinedOutput()
		return string(out), exitCode(err)
	}
	if out, code := members(tokenA); code == 0 || !strings.Contains(out, "admin") {
		t.Fatalf("members with a namespace token: exit %d: %s", code, out)
	}
	if out, code := members(adminToken); code != 0 || strings.Count(out, "Voter") != 3 {
		t.Fatalf("members with the admin token: exit %d: %s", code, out)
	}
	// The metrics and the status page show every namespace: admin only.
	caCfg, err := lockcluster.TLSFiles{CA: filepath.Join(certs, "ca.crt")}.Config()
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: caCfg}, Timeout: 5 * time.Second}
	for _, path := range []string{"/metrics", "/", "/api/state"} {
		get := func(token string) int {
			req, _ := http.NewRequest("GET", "https://"+pc.Nodes[0].HTTP+path, nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		if code := get(""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without credentials: %d", path, code)
		}
		if code := get(tokenA); code != http.StatusUnauthorized {
			t.Errorf("GET %s with a namespace token: %d", path, code)
		}
		if code := get(adminToken); code != http.StatusOK {
			t.Errorf("GET %s with the admin token: %d", path, code)
		}
	}
	// Tokens never reach the logs.
	for _, p := range pc.Nodes {
		b, _ := os.ReadFile(p.Log)
		for _, tok := range []string{adminToken, tokenA, tokenB} {
			if strings.Contains(string(b), tok) {
				t.Fatalf("%s's log contains a token", p.ID)
			}
		}
	}
}

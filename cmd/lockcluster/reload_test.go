package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/pki"
	"github.com/lockcluster/lockcluster/internal/testutil"
)

// Reloading without a restart (reload.go, README "Reloading settings").

// waitLog waits until the log at path says what at least n times, and
// returns the log.
func waitLog(t *testing.T, path, what string, n int) string {
	t.Helper()
	var text string
	testutil.Eventually(t, 15*time.Second, fmt.Sprintf("%d × %q in %s", n, what, filepath.Base(path)), func() bool {
		b, _ := os.ReadFile(path)
		text = string(b)
		return strings.Count(text, what) >= n
	})
	return text
}

// hup sends node i SIGHUP.
func (pc *procCluster) hup(i int) {
	pc.t.Helper()
	if err := pc.Signal(i, syscall.SIGHUP); err != nil {
		pc.t.Fatal(err)
	}
}

// A node's certificate rotated in place is in force for new connections
// of every kind (client API, raft, HTTP), on SIGHUP and, without one,
// through the file watch, while the connections already open and the
// cluster go on: node0 watches nothing and reloads on SIGHUP only, node1
// watches its files every 100ms and takes no signal. A certificate that
// does not load (garbage, then a rotation half written) is not applied:
// the node keeps the one in force and says so, naming the file.
func TestReloadTLS(t *testing.T) {
	certs := t.TempDir()
	if err := pki.CreateCA(certs, "reload CA", time.Hour); err != nil {
		t.Fatal(err)
	}
	next := filepath.Join(certs, "next") // the certificates rotated to
	for _, dir := range []string{certs, next} {
		for _, n := range []string{"node0", "node1", "node2", "client"} {
			if err := pki.CreateCert(pki.CertRequest{CADir: certs, OutDir: dir, Name: n, Hosts: []string{"127.0.0.1", "localhost"}, Validity: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
	}
	ca := filepath.Join(certs, "ca.crt")
	file := func(id, ext string) string { return filepath.Join(certs, id+ext) }
	watch := map[string]string{"node0": "0", "node1": "100ms", "node2": "5s"}
	admin, err := lockcluster.TLSFiles{CA: ca}.Config()
	if err != nil {
		t.Fatal(err)
	}
	pc := startProcsWith(t, 3, func(id string) []string {
		return []string{"--tls-ca", ca, "--tls-cert", file(id, ".crt"), "--tls-key", file(id, ".key"), "--tls-watch-interval", watch[id]}
	}, []lockcluster.Option{lockcluster.WithTLS(admin)})

	// presented is the serial of the certificate node i presents on a new
	// connection to its client API, raft and HTTP ports (raft's wants a
	// client certificate of the CA).
	pool := admin.RootCAs
	client, err := tls.LoadX509KeyPair(file("client", ".crt"), file("client", ".key"))
	if err != nil {
		t.Fatal(err)
	}
	presented := func(i int) [3]string {
		var out [3]string
		n := pc.Nodes[i]
		for j, addr := range []string{n.GRPC, n.Raft, n.HTTP} {
			cfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{client}}
			if j == 0 {
				cfg.NextProtos = []string{"h2"}
			}
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
			if err != nil {
				out[j] = "error: " + err.Error()
				continue
			}
			out[j] = c.ConnectionState().PeerCertificates[0].SerialNumber.String()
			c.Close()
		}
		return out
	}
	serial := func(path string) string {
		pair, err := tls.LoadX509KeyPair(path, strings.TrimSuffix(path, ".crt")+".key")
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.SerialNumber.String()
	}
	all := func(s string) [3]string { return [3]string{s, s, s} }
	copyFile := func(src, dst string) {
		t.Helper()
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old0, old1 := serial(file("node0", ".crt")), serial(file("node1", ".crt"))
	new0, new1 := serial(filepath.Join(next, "node0.crt")), serial(filepath.Join(next, "node1.crt"))
	if got := presented(0); got != all(old0) {
		t.Fatalf("node0 presents %v, want %s", got, old0)
	}

	// A session open across the rotations, through node0 and node1.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tlsOpt := lockcluster.WithTLS(admin)
	before := dialT(t, []string{pc.Nodes[0].GRPC, pc.Nodes[1].GRPC}, tlsOpt)
	if _, err := before.Acquire(ctx, "before", lockcluster.Options{}); err != nil {
		t.Fatal(err)
	}

	// SIGHUP with a certificate file that does not load: the reload fails,
	// naming the file, and node0 serves on with its certificate.
	log0 := pc.Nodes[0].Log
	if err := os.WriteFile(file("node0", ".crt"), []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pc.hup(0)
	if text := waitLog(t, log0, "reload failed", 1); !strings.Contains(text, file("node0", ".crt")) {
		t.Fatalf("the failed reload does not name the certificate file:\n%s", text)
	}
	if got := presented(0); got != all(old0) {
		t.Fatalf("after a failed reload node0 presents %v, want %s", got, old0)
	}

	// The new pair, and SIGHUP: node0 watches nothing, so the signal is
	// what puts it in force.
	copyFile(filepath.Join(next, "node0.key"), file("node0", ".key"))
	copyFile(filepath.Join(next, "node0.crt"), file("node0", ".crt"))
	if got := presented(0); got != all(old0) {
		t.Fatalf("node0, which watches nothing, took its new files without a signal: %v", got)
	}
	pc.hup(0)
	waitLog(t, log0, "settings reloaded", 1)
	if got := presented(0); got != all(new0) {
		t.Fatalf("after SIGHUP node0 presents %v, want %s", got, new0)
	}
	if text := waitLog(t, log0, "TLS reloaded", 1); !strings.Contains(text, "by=reload") {
		t.Fatalf("node0's log does not say the reload changed its TLS:\n%s", text)
	}

	// node1's watch: the key written, its certificate not yet, is a pair
	// that does not match, and is not applied; then the certificate.
	log1 := pc.Nodes[1].Log
	copyFile(filepath.Join(next, "node1.key"), file("node1", ".key"))
	waitLog(t, log1, "do not load", 1)
	if got := presented(1); got != all(old1) {
		t.Fatalf("a half-written pair: node1 presents %v, want %s", got, old1)
	}
	copyFile(filepath.Join(next, "node1.crt"), file("node1", ".crt"))
	testutil.Eventually(t, 15*time.Second, "node1's watch applying its new certificate", func() bool { return presented(1) == all(new1) })
	if text := waitLog(t, log1, "TLS reloaded", 1); !strings.Contains(text, "by=watch") {
		t.Fatalf("node1's log does not say the watch changed its TLS:\n%s", text)
	}

	// The cluster goes on: the session opened before, new clients through
	// either node, and raft: node2, restarted, is dialled by the others and
	// dials them with their new certificates in force, and catches up.
	if _, err := before.Acquire(ctx, "after", lockcluster.Options{}); err != nil {
		t.Fatalf("the session opened before the rotations: %v", err)
	}
	for i := range 2 {
		c := dialT(t, []string{pc.Nodes[i].GRPC}, tlsOpt)
		if _, err := c.Acquire(ctx, fmt.Sprint("new-", i), lockcluster.Options{}); err != nil {
			t.Fatalf("a new client through node%d: %v", i, err)
		}
	}
	pc.terminate(2)
	pc.start(2)
	if err := pc.CaughtUp(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	c := dialT(t, []string{pc.Nodes[2].GRPC}, tlsOpt)
	q, err := c.Query(ctx)
	if err != nil || len(q.Held) != 4 {
		t.Fatalf("node2, restarted, sees %+v, %v; want the 4 locks held", q, err)
	}
}

// Tokens and namespace grants, log level and the warnings of a reload, on
// one node with auth (no TLS: the credentials are what changes).
func TestReloadSettings(t *testing.T) {
	const (
		admin   = "admin-0123456789abcdef-reload"
		tokenA2 = "team-a2-0123456789abcdef"
	)
	dir := t.TempDir()
	config := filepath.Join(dir, "lockcluster.yaml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(config, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	auth := func(namespaces string) string {
		return fmt.Sprintf("auth:\n  admin-tokens: [%q]\n  namespaces:\n%s", admin, namespaces)
	}
	write(auth(fmt.Sprintf("    a:\n      tokens: [%q]\n", tokenA)))
	pc := startProcsWith(t, 1, func(string) []string { return []string{"--config", config} },
		[]lockcluster.Option{lockcluster.WithToken(admin)})
	log0 := pc.Nodes[0].Log
	// query runs the CLI in namespace ns with token and returns its exit
	// status.
	query := func(ns, token string) int {
		t.Helper()
		cmd := exec.Command(pc.bin, "query", "--addr", pc.Nodes[0].GRPC, "--namespace", ns, "--token", token)
		out, err := cmd.CombinedOutput()
		if code := exitCode(err); code != 0 && code != exitNoPerm {
			t.Fatalf("query -n %s: exit %d: %s", ns, code, out)
		}
		return exitCode(err)
	}
	check := func(when string, want map[[2]string]int) {
		t.Helper()
		for k, code := range want {
			if got := query(k[0], k[1]); got != code {
				t.Errorf("%s: namespace %s with token %.7s…: exit %d, want %d", when, k[0], k[1], got, code)
			}
		}
	}
	check("at start", map[[2]string]int{{"a", tokenA}: 0, {"b", tokenB}: exitNoPerm})

	// A token added, and a namespace.
	write(auth(fmt.Sprintf("    a:\n      tokens: [%q, %q]\n    b:\n      tokens: [%q]\n", tokenA, tokenA2, tokenB)))
	pc.hup(0)
	waitLog(t, log0, "settings reloaded", 1)
	check("tokens added", map[[2]string]int{{"a", tokenA}: 0, {"a", tokenA2}: 0, {"b", tokenB}: 0})

	// A token removed.
	write(auth(fmt.Sprintf("    a:\n      tokens: [%q]\n    b:\n      tokens: [%q]\n", tokenA2, tokenB)))
	pc.hup(0)
	waitLog(t, log0, "settings reloaded", 2)
	check("a token removed", map[[2]string]int{{"a", tokenA}: exitNoPerm, {"a", tokenA2}: 0, {"b", tokenB}: 0})

	// A file that does not parse: the reload fails, naming the file, and
	// the credentials in force stay.
	write("auth: [\n")
	pc.hup(0)
	if text := waitLog(t, log0, "reload failed", 1); !strings.Contains(text, config) {
		t.Fatalf("the failed reload does not name the config file:\n%s", text)
	}
	// A value out of range: the same.
	write(auth(fmt.Sprintf("    a:\n      tokens: [%q]\n", tokenA)) + "namespace-rate: fast\n")
	pc.hup(0)
	waitLog(t, log0, "reload failed", 2)
	check("after failed reloads", map[[2]string]int{{"a", tokenA}: exitNoPerm, {"a", tokenA2}: 0, {"b", tokenB}: 0})

	// A setting only a restart puts in force is a warning that names it;
	// one the node was started with a flag for stays the flag's, without
	// a warning; the log level changes.
	write(auth(fmt.Sprintf("    a:\n      tokens: [%q]\n", tokenA2)) +
		"advertise-grpc: 127.0.0.1:1\ndata-dir: " + filepath.Join(dir, "elsewhere") + "\nlog-level: debug\n")
	pc.hup(0)
	text := waitLog(t, log0, "settings reloaded", 3)
	if !strings.Contains(text, "only a restart puts in force") || !strings.Contains(text, "setting=advertise-grpc") {
		t.Fatalf("no warning naming advertise-grpc:\n%s", text)
	}
	if strings.Contains(text, "setting=data-dir") {
		t.Fatalf("data-dir, given as a flag at start, was taken from the file:\n%s", text)
	}
	if !strings.Contains(text, "changed_since_start=log-level") {
		t.Fatalf("the reload does not say the log level changed:\n%s", text)
	}
	// The node serves on.
	check("after the warning", map[[2]string]int{{"a", tokenA2}: 0, {"b", tokenB}: exitNoPerm})
	for _, tok := range []string{admin, tokenA, tokenA2, tokenB} {
		if strings.Contains(text, tok) {
			t.Fatal("a token reached the log")
		}
	}
}

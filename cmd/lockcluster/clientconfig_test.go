package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockcluster/lockcluster"
)

// argsFor are the arguments a client command needs to get as far as
// dialing; a command not listed needs none.
var argsFor = map[string][]string{
	"lockcluster lock":          {"cfg-x", "--", "true"},
	"lockcluster elect":         {"cfg-x", "--value", "v"},
	"lockcluster observe":       {"cfg-x"},
	"lockcluster record get":    {"cfg-x"},
	"lockcluster record set":    {"cfg-x", "v"},
	"lockcluster record delete": {"cfg-x"},
	"lockcluster join":          {"--id", "node9", "--raft-addr", "127.0.0.1:1"},
	"lockcluster leave":         {"node9"},
	"lockcluster promote":       {"node9"},
	"lockcluster snapshot save": {"SNAPSHOT"},
	"lockcluster bench":         {"--duration", "1s"},
	"lockcluster slots move":    {"7", "--to", "1"},
}

// knock is a listener that reports its first connection, and answers none.
func knock(t *testing.T) (string, <-chan struct{}) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	knocked := make(chan struct{})
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for first := true; ; first = false {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
			if first {
				close(knocked)
			}
		}
	}()
	return l.Addr().String(), knocked
}

// Every command that connects to a cluster (every command of the tree but
// offlineCommands) takes its endpoints from --config, before
// LOCKCLUSTER_ADDR: it connects to the file's endpoint and not to the
// environment's.
func TestClientConfigEveryCommand(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	var commands []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && !offline(c) {
			commands = append(commands, c)
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRoot())
	if len(commands) < 10 {
		t.Fatalf("only %d client commands in the tree", len(commands))
	}
	for _, c := range commands {
		path := c.CommandPath()
		t.Run(strings.TrimPrefix(path, "lockcluster "), func(t *testing.T) {
			fileAddr, viaFile := knock(t)
			envAddr, viaEnv := knock(t)
			config := filepath.Join(dir, "client.yaml")
			if err := os.WriteFile(config, []byte(fmt.Sprintf("endpoints: [%s]\nnamespace: cfg\n", fileAddr)), 0o600); err != nil {
				t.Fatal(err)
			}
			args := append(strings.Fields(strings.TrimPrefix(path, "lockcluster")), "--config", config, "--request-timeout", "5s")
			for _, a := range argsFor[path] {
				args = append(args, strings.ReplaceAll(a, "SNAPSHOT", filepath.Join(t.TempDir(), "snap")))
			}
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), "LOCKCLUSTER_ADDR="+envAddr, "LOCKCLUSTER_CLIENT_CONFIG=")
			out := &strings.Builder{}
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited, done := make(chan error, 1), make(chan struct{})
			go func() { exited <- cmd.Wait(); close(done) }()
			defer func() {
				cmd.Process.Kill()
				<-done // not <-exited: the select below may have taken its value
			}()
			select {
			case <-viaFile:
			case <-viaEnv:
				t.Fatalf("%v connected to LOCKCLUSTER_ADDR, not to the config file's endpoint", args)
			case err := <-exited:
				t.Fatalf("%v exited (%v) without connecting to the config file's endpoint (a command that connects to no cluster belongs in offlineCommands):\n%s", args, err, out)
			case <-time.After(15 * time.Second):
				t.Fatalf("%v did not connect to the config file's endpoint within 15s:\n%s", args, out)
			}
		})
	}
}

// The config file against a cluster with auth: it gives the endpoints,
// namespace and token file (a relative path); flags beat it and it beats
// the environment; a token file others may read, an empty one, and an
// unknown key are refused, naming the file.
func TestClientConfigFile(t *testing.T) {
	authDir := t.TempDir()
	auth := filepath.Join(authDir, "lockcluster.yaml")
	os.WriteFile(auth, []byte(fmt.Sprintf("auth:\n  admin-tokens: [%q]\n  namespaces:\n    a:\n      tokens: [%q]\n    b:\n      tokens: [%q]\n", adminToken, tokenA, tokenB)), 0o600)
	pc := startProcsWith(t, 1, func(string) []string { return []string{"--config", auth} },
		[]lockcluster.Option{lockcluster.WithToken(adminToken)})
	node := pc.Nodes[0].GRPC
	dead := freePort(t)

	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("a.token", tokenA+"\n", 0o600)
	write("admin.token", adminToken+"\n", 0o400)
	cfgA := write("a.yaml", fmt.Sprintf("endpoints:\n  - %s\nnamespace: a\ntoken-file: a.token\n", node), 0o644)
	cfgAdmin := write("admin.yaml", fmt.Sprintf("endpoints: [%s]\ntoken-file: admin.token\n", node), 0o644)

	// The environment points elsewhere: a dead endpoint, namespace b, b's
	// token.
	env := []string{"LOCKCLUSTER_ADDR=" + dead, "LOCKCLUSTER_NAMESPACE=b", "LOCKCLUSTER_TOKEN=" + tokenB, "LOCKCLUSTER_CLIENT_CONFIG="}
	runEnv := func(env []string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(pc.bin, args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), exitCode(err)
	}
	check := func(env []string, wantCode int, want []string, args ...string) {
		t.Helper()
		out, code := runEnv(env, args...)
		if code != wantCode {
			t.Fatalf("%v: exit %d, want %d: %s", args, code, wantCode, out)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Fatalf("%v: no %q in: %s", args, w, out)
			}
		}
	}

	t.Run("the file beats the environment", func(t *testing.T) {
		check(env, 0, nil, "lock", "cfg-lock", "--config", cfgA, "--", "true")
		check(env, 0, nil, "query", "--config", cfgA)
		check(env, 0, []string{"Voter"}, "members", "--config", cfgAdmin)
		check(env, 0, []string{"Leader"}, "status", "--config", cfgAdmin)
		// LOCKCLUSTER_CLIENT_CONFIG names the file when --config does not.
		check(append(env, "LOCKCLUSTER_CLIENT_CONFIG="+cfgA), 0, nil, "query")
	})
	t.Run("flags beat the file", func(t *testing.T) {
		check(env, exitNoPerm, []string{"permission denied"}, "query", "--config", cfgA, "--token", tokenA+"x")
		check(env, exitNoPerm, []string{"permission denied", `"b"`}, "query", "--config", cfgA, "-n", "b")
		check(env, exitUnavailable, nil, "query", "--config", cfgA, "--addr", dead, "--request-timeout", "1s")
		check(env, 0, nil, "query", "--config", cfgA, "-n", "b", "--token", tokenB)
		check(env, 0, nil, "query", "--config", cfgAdmin, "-n", "a", "--token-file", filepath.Join(dir, "a.token"))
	})
	t.Run("a TLS client is told at once that the node speaks plaintext", func(t *testing.T) {
		certs := filepath.Join(dir, "certs")
		if out, err := exec.Command(pc.bin, "tls", "ca", "create", "--dir", certs).CombinedOutput(); err != nil {
			t.Fatalf("tls ca create: %v\n%s", err, out)
		}
		tlsCfg := write("tls.yaml", fmt.Sprintf("endpoints: [%s]\nnamespace: a\ntoken-file: a.token\ntls: {ca: certs/ca.crt}\n", node), 0o600)
		check(env, exitUnavailable, []string{"TLS mismatch", node + " speaks plaintext"}, "query", "--config", tlsCfg, "--request-timeout", "1m")
	})
	t.Run("the environment without a file", func(t *testing.T) {
		check([]string{"LOCKCLUSTER_ADDR=" + node, "LOCKCLUSTER_NAMESPACE=a", "LOCKCLUSTER_TOKEN_FILE=" + filepath.Join(dir, "a.token"), "LOCKCLUSTER_CLIENT_CONFIG=", "LOCKCLUSTER_TOKEN="}, 0, nil, "query")
		check([]string{"LOCKCLUSTER_ADDR=" + node, "LOCKCLUSTER_NAMESPACE=a", "LOCKCLUSTER_TOKEN=" + tokenB, "LOCKCLUSTER_CLIENT_CONFIG="}, exitNoPerm, nil, "query")
	})
	t.Run("a token file others may read is refused, naming it", func(t *testing.T) {
		open := write("open.token", tokenA+"\n", 0o644)
		cfgOpen := write("open.yaml", fmt.Sprintf("endpoints: [%s]\nnamespace: a\ntoken-file: %s\n", node, open), 0o600)
		check(env, exitUsage, []string{open, "0644"}, "query", "--config", cfgOpen)
		check(env, exitUsage, []string{open, "0644"}, "query", "--addr", node, "-n", "a", "--token-file", open)
		group := write("group.token", tokenA+"\n", 0o640)
		check(env, exitUsage, []string{group, "0640"}, "query", "--addr", node, "-n", "a", "--token-file", group)
	})
	t.Run("bad files are refused, naming them", func(t *testing.T) {
		empty := write("empty.token", "\n", 0o600)
		check(env, exitUsage, []string{empty, "empty"}, "query", "--addr", node, "-n", "a", "--token-file", empty)
		unknown := write("unknown.yaml", fmt.Sprintf("endpoints: [%s]\nnamespace: a\ntokenfile: a.token\n", node), 0o600)
		check(env, exitUsage, []string{unknown, `unknown key "tokenfile"`}, "query", "--config", unknown)
		nested := write("nested.yaml", "tls:\n  ca: ca.crt\n  cacert: x\n", 0o600)
		check(env, exitUsage, []string{nested, `unknown key "cacert"`}, "query", "--config", nested)
		check(env, exitUsage, []string{"--token and --token-file"}, "query", "--config", cfgA, "--token", tokenA, "--token-file", filepath.Join(dir, "a.token"))
	})
}

// Relative paths in the file are relative to its directory; the token
// file's trailing newline is not part of the token.
func TestClientConfigLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.yaml")
	os.WriteFile(p, []byte("endpoints: [h1:7700, h2:7700]\ntls: {ca: certs/ca.crt, cert: /abs/app.crt, key: app.key}\ntoken-file: t\n"), 0o600)
	cfg, err := loadClientConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TLS.CA != filepath.Join(dir, "certs/ca.crt") || cfg.TLS.Cert != "/abs/app.crt" || cfg.TLS.Key != filepath.Join(dir, "app.key") ||
		cfg.TokenFile != filepath.Join(dir, "t") || strings.Join(cfg.Endpoints, ",") != "h1:7700,h2:7700" {
		t.Fatalf("%+v", cfg)
	}
	empty := filepath.Join(dir, "empty.yaml")
	os.WriteFile(empty, nil, 0o600)
	if _, err := loadClientConfig(empty); err != nil {
		t.Fatalf("an empty file: %v", err)
	}
	tok := filepath.Join(dir, "tok")
	os.WriteFile(tok, []byte("s3cret\r\n"), 0o600)
	if got, err := readTokenFile(tok); err != nil || got != "s3cret" {
		t.Fatalf("token %q, %v", got, err)
	}
}

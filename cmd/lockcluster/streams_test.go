package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster/internal/node"
)

// The stream and connection limits reach the node's configuration: their
// defaults as the node's, 0 as no limit (the node's -1), a negative value
// refused.
func TestServeStreamLimits(t *testing.T) {
	var cfg node.Config
	if err := defaultServeConfig().streamLimits(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Server.MaxStreamsPerSession != 4 || cfg.MaxConcurrentStreams != node.DefaultMaxConcurrentStreams ||
		cfg.MaxConnsPerIP != node.DefaultMaxConnsPerIP || cfg.ConnIdleTimeout != node.DefaultConnIdleTimeout {
		t.Fatalf("defaults: %d streams per session, %d streams per connection, %d connections per address, idle %s",
			cfg.Server.MaxStreamsPerSession, cfg.MaxConcurrentStreams, cfg.MaxConnsPerIP, cfg.ConnIdleTimeout)
	}
	c := defaultServeConfig()
	c.streamsPerSession, c.streamsPerConn, c.connsPerIP, c.connIdle = 0, 0, 0, 0
	if err := c.streamLimits(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Server.MaxStreamsPerSession != -1 || cfg.MaxConcurrentStreams != -1 || cfg.MaxConnsPerIP != -1 || cfg.ConnIdleTimeout != -1 {
		t.Fatalf("0 is no limit: got %d, %d, %d, %s", cfg.Server.MaxStreamsPerSession, cfg.MaxConcurrentStreams, cfg.MaxConnsPerIP, cfg.ConnIdleTimeout)
	}
	for _, bad := range []func(c *serveConfig){
		func(c *serveConfig) { c.streamsPerSession = -1 },
		func(c *serveConfig) { c.connsPerIP = -5 },
		func(c *serveConfig) { c.connIdle = -time.Second },
	} {
		c := defaultServeConfig()
		bad(c)
		if err := c.streamLimits(&cfg); err == nil || !strings.Contains(err.Error(), "--") {
			t.Errorf("%+v: %v, want a usage error naming the flag", c, err)
		}
	}
}

// 'bench --local' lifts the connection cap of its nodes (every client is
// on this machine), unless told a cap, or the server binary is older than
// the flag.
func TestBenchLocalLiftsTheConnectionCap(t *testing.T) {
	dir := t.TempDir()
	script := func(name, help string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho '"+help+"'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	now, old := script("now", "  --max-conns-per-ip int   client API connections"), script("old", "  --stream-backlog-bytes int")
	if got := uncapConns(now, []string{"--enable-pprof"}); !slices.Equal(got, []string{"--enable-pprof", "--max-conns-per-ip=0"}) {
		t.Errorf("current binary: %q", got)
	}
	if got := uncapConns(now, []string{"--max-conns-per-ip=64"}); !slices.Equal(got, []string{"--max-conns-per-ip=64"}) {
		t.Errorf("a cap given: %q", got)
	}
	if got := uncapConns(old, nil); len(got) != 0 {
		t.Errorf("older binary: %q", got)
	}
}

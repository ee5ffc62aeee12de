package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Settings come from the flag, else the environment, else the file.
func TestServeSettingsPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "lockcluster.yaml")
	os.WriteFile(file, []byte("id: from-file\ndata-dir: /file\ngrpc-addr: 127.0.0.1:1\nheartbeat-timeout: 700ms\n"), 0o644)
	t.Setenv("LOCKCLUSTER_DATA_DIR", "/env")
	t.Setenv("LOCKCLUSTER_GRPC_ADDR", "127.0.0.1:2")
	c := defaultServeConfig()
	cmd := serveCommand(c)
	if err := cmd.Flags().Parse([]string{"--grpc-addr", "127.0.0.1:3"}); err != nil {
		t.Fatal(err)
	}
	if err := resolve(cmd.Flags(), c.settings(), file, map[string]any{"auth": &c.auth}); err != nil {
		t.Fatal(err)
	}
	if c.id != "from-file" || c.dataDir != "/env" || c.grpcAddr != "127.0.0.1:3" || c.heartbeat != 700*time.Millisecond || c.raftAddr != "127.0.0.1:7701" {
		t.Fatalf("got id=%q data-dir=%q grpc-addr=%q heartbeat=%s raft-addr=%q", c.id, c.dataDir, c.grpcAddr, c.heartbeat, c.raftAddr)
	}
}

func TestServeSettingsErrorsNameTheValue(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ yaml, want string }{
		{"idd: x\n", `unknown key "idd"`},
		{"heartbeat-timeout: soon\n", `"soon" is not a duration`},
		{"id: [1, 2]\n", "config file"},
	} {
		file := filepath.Join(dir, "c.yaml")
		os.WriteFile(file, []byte(tc.yaml), 0o644)
		c := defaultServeConfig()
		cmd := serveCommand(c)
		err := resolve(cmd.Flags(), c.settings(), file, map[string]any{"auth": &c.auth})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config %q: error %v, want it to mention %s", tc.yaml, err, tc.want)
		}
	}
	t.Setenv("LOCKCLUSTER_ELECTION_TIMEOUT", "fast")
	c := defaultServeConfig()
	cmd := serveCommand(c)
	if err := resolve(cmd.Flags(), c.settings(), "", nil); err == nil || !strings.Contains(err.Error(), "LOCKCLUSTER_ELECTION_TIMEOUT") {
		t.Errorf("bad env: %v", err)
	}
	if _, err := parsePeers("node0=h:1,broken"); err == nil || !strings.Contains(err.Error(), `"broken"`) {
		t.Errorf("bad --bootstrap: %v", err)
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"800MiB": 800 << 20, "2GiB": 2 << 30, "1 GB": 1e9, "4096": 4096, "10KiB": 10 << 10, "7B": 7} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "lots", "-1MiB", "0", "1.5GiB", "9999999TiB"} {
		if _, err := parseBytes(in); err == nil || !strings.Contains(err.Error(), strconv.Quote(in)) {
			t.Errorf("parseBytes(%q): error %v, want one naming the value", in, err)
		}
	}
	if err := (&serveConfig{memoryLimit: "lots", logLevel: "info", limits: defaultLimits()}).run(); err == nil || !strings.Contains(err.Error(), `--memory-limit: "lots"`) {
		t.Errorf("serve --memory-limit lots: %v", err)
	}
	if err := (&serveConfig{gcHeadroom: "-5MiB", logLevel: "info", limits: defaultLimits()}).run(); err == nil || !strings.Contains(err.Error(), `--gc-headroom: "-5MiB"`) {
		t.Errorf("serve --gc-headroom -5MiB: %v", err)
	}
	for _, s := range defaultServeConfig().settings() {
		if s.key == "enable-pprof" {
			if err := s.set("maybe"); err == nil || !strings.Contains(err.Error(), `"maybe"`) {
				t.Errorf("--enable-pprof maybe: %v", err)
			}
		}
	}
}

// The sample config file is the settings table's: the committed one is
// what 'serve --sample-config' prints, and read back it sets every setting
// to its default.
func TestSampleConfig(t *testing.T) {
	committed, err := os.ReadFile("../../deploy/lockcluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if string(committed) != string(sampleConfig()) {
		t.Fatal("deploy/lockcluster.yaml is not what 'serve --sample-config' prints: run 'go generate ./cmd/lockcluster'")
	}
	file := filepath.Join(t.TempDir(), "sample.yaml")
	if err := os.WriteFile(file, committed, 0o644); err != nil {
		t.Fatal(err)
	}
	var zero serveConfig
	if err := readFile(file, zero.settings(), map[string]any{"auth": &zero.auth}); err != nil {
		t.Fatalf("the sample does not read: %v", err)
	}
	got, want := zero.settings(), defaultServeConfig().settings()
	for i := range want {
		if want[i].key != "id" && got[i].yamlValue() != want[i].yamlValue() {
			t.Errorf("%s: the sample sets %s, the default is %s", want[i].key, got[i].yamlValue(), want[i].yamlValue())
		}
	}
}

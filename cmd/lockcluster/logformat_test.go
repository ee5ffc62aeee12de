package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

func TestServeLogFormat(t *testing.T) {
	pc := startProcsWith(t, 1, func(string) []string { return []string{"--log-format", "json", "--log-level", "debug"} }, nil)
	p := pc.Nodes[0]
	var lines []string
	testutil.Eventually(t, 10*time.Second, "the node's start in its log", func() bool {
		b, _ := os.ReadFile(p.Log)
		lines = strings.Split(strings.TrimSpace(string(b)), "\n")
		return strings.Contains(string(b), `"serving"`)
	})
	levels := map[string]bool{}
	var started bool
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("a log line is not JSON (%v): %s", err, l)
		}
		lvl, _ := m["@level"].(string)
		levels[lvl] = true
		if m["@message"] == "starting" && m["version"] != "" && m["go"] != "" {
			started = true
		}
		if _, ok := m["@timestamp"]; !ok {
			t.Fatalf("no @timestamp: %s", l)
		}
	}
	if !started || !levels["info"] || !levels["debug"] {
		t.Fatalf("levels %v, start line with the version %v:\n%s", levels, started, strings.Join(lines, "\n"))
	}

	out, code := run(t, pc, "serve", "--log-format", "xml")
	if code != exitUsage || !strings.Contains(out, `"xml"`) {
		t.Fatalf("--log-format xml: exit %d: %s", code, out)
	}
}

package deploy

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// metricNames are the lockcluster_* names in text, without histogram suffixes.
func metricNames(text string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`\blockcluster_[a-zA-Z_]+`).FindAllString(text, -1) {
		m = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_count"), "_sum")
		out = append(out, m)
	}
	return out
}

// checkMetrics fails for a lockcluster_* name that internal/metrics does not
// define (raft's lockcluster_raft_* come from hashicorp/go-metrics).
func checkMetrics(t *testing.T, file, text string) {
	t.Helper()
	var src bytes.Buffer
	files, _ := filepath.Glob("../internal/metrics/*.go")
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			b, _ := os.ReadFile(f)
			src.Write(b)
		}
	}
	raft := map[string]bool{"lockcluster_raft_state_leader": true, "lockcluster_raft_state_candidate": true, "lockcluster_raft_commitTime": true}
	for _, n := range metricNames(text) {
		if !raft[n] && !strings.Contains(src.String(), `"`+n+`"`) {
			t.Errorf("%s: metric %s is not one lockcluster exports", file, n)
		}
	}
}

func TestAlertRules(t *testing.T) {
	b, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" {
				t.Fatalf("a rule without alert or expr: %+v", r)
			}
			n++
		}
	}
	if n < 5 {
		t.Fatalf("%d rules", n)
	}
	checkMetrics(t, "alerts.yml", string(b))
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI: promtool is missing (Debian package prometheus, see .ci/run)")
		}
		t.Skip("no promtool (Debian package prometheus): the rules parse as YAML only")
	}
	if out, err := exec.Command(promtool, "check", "rules", "prometheus/alerts.yml").CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// The alert rules' unit tests (prometheus/*_test.yml: series in, alerts
// out) pass `promtool test rules`, and name only metrics lockcluster has.
func TestAlertRuleUnitTests(t *testing.T) {
	files, _ := filepath.Glob("prometheus/*_test.yml")
	if len(files) == 0 {
		t.Fatal("no prometheus/*_test.yml")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checkMetrics(t, f, string(b))
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI: promtool is missing (Debian package prometheus, see .ci/run)")
		}
		t.Skip("no promtool (Debian package prometheus): the rules' unit tests do not run")
	}
	if out, err := exec.Command(promtool, append([]string{"test", "rules"}, files...)...).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("grafana/lockcluster.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard: %+v", d)
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 || p.Targets[0].Expr == "" {
			t.Fatalf("panel %q has no query", p.Title)
		}
	}
	checkMetrics(t, "lockcluster.json", string(b))
}

// Each deploy file says how to use it in its first three lines: comments
// (a JSON dashboard, which has none, in its description).
func TestFilesSayHowToUseThem(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.HasSuffix(path, ".json") {
			var d struct{ Description string }
			if json.Unmarshal(b, &d) != nil || len(d.Description) < 40 {
				t.Errorf("%s: no description that says how to use it", path)
			}
			return nil
		}
		lines := strings.SplitN(string(b), "\n", 4)
		if len(lines) < 4 {
			t.Errorf("%s: fewer than three lines", path)
			return nil
		}
		for _, l := range lines[:3] {
			if !strings.HasPrefix(l, "# ") {
				t.Errorf("%s: its first three lines are not a comment that says how to use it: %q", path, l)
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Every deploy/ path the README names exists.
func TestReadmePathsExist(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range regexp.MustCompile(`\bdeploy/[A-Za-z0-9_./-]*[A-Za-z0-9_]`).FindAllString(string(b), -1) {
		if seen[p] {
			continue
		}
		seen[p] = true
		if _, err := os.Stat(filepath.Join("..", p)); err != nil {
			t.Errorf("the README names %s: %v", p, err)
		}
	}
	if len(seen) < 5 {
		t.Fatalf("the README names only %v under deploy/", seen)
	}
}

package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
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

func TestKubernetes(t *testing.T) {
	f, err := os.Open("kubernetes/lockcluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	kinds := map[string]int{}
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		kind, _ := doc["kind"].(string)
		kinds[kind]++
		if kind == "StatefulSet" {
			b, _ := json.Marshal(doc)
			var ss struct {
				Spec struct {
					Replicas    int
					ServiceName string `json:"serviceName"`
					Template    struct {
						Spec struct {
							Containers []struct {
								LivenessProbe struct {
									HTTPGet struct{ Path string } `json:"httpGet"`
								} `json:"livenessProbe"`
								ReadinessProbe struct {
									HTTPGet struct{ Path string } `json:"httpGet"`
								} `json:"readinessProbe"`
								Args []string
							}
						}
					}
				}
			}
			if err := json.Unmarshal(b, &ss); err != nil {
				t.Fatal(err)
			}
			c := ss.Spec.Template.Spec.Containers
			if ss.Spec.Replicas != 3 || ss.Spec.ServiceName != "lockcluster" || len(c) != 1 ||
				c[0].LivenessProbe.HTTPGet.Path != "/livez" || c[0].ReadinessProbe.HTTPGet.Path != "/readyz" || c[0].Args[0] != "serve" {
				t.Fatalf("StatefulSet: %+v", ss.Spec)
			}
		}
	}
	if kinds["Service"] != 2 || kinds["StatefulSet"] != 1 || kinds["PodDisruptionBudget"] != 1 {
		t.Fatalf("kinds: %v", kinds)
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

func TestSystemdUnit(t *testing.T) {
	f, err := os.Open("systemd/lockcluster.service")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sections := map[string]map[string]string{}
	var cur map[string]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			cur = map[string]string{}
			sections[strings.Trim(line, "[]")] = cur
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || cur == nil {
				t.Fatalf("not a key=value line in a section: %q", line)
			}
			cur[k] = v
		}
	}
	if sections["Unit"] == nil || sections["Install"] == nil || !strings.HasSuffix(sections["Service"]["ExecStart"], "lockcluster serve") ||
		sections["Service"]["KillSignal"] != "SIGTERM" {
		t.Fatalf("unit: %v", sections)
	}
}

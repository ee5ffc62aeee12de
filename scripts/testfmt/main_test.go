package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFormat runs go test -json on a small module with a passing package,
// a failing test, a slow package and one that does not build, and checks
// what a person would see.
func TestFormat(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":            "module example.com/m\n\ngo 1.21\n",
		"good/good_test.go": "package good\nimport \"testing\"\nfunc TestGood(t *testing.T) { t.Log(\"quiet-when-passing\") }\n",
		"bad/bad_test.go":   "package bad\nimport \"testing\"\nfunc TestOK(t *testing.T) {}\nfunc TestBad(t *testing.T) { t.Log(\"why-it-failed\"); t.Fail() }\n",
		"slow/slow_test.go": "package slow\nimport (\"testing\"; \"time\")\nfunc TestSlow(t *testing.T) { time.Sleep(1500 * time.Millisecond) }\n",
		"broken/broken.go":  "package broken\nfunc f() { undefined() }\n",
	}
	for name, text := range files {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "test", "-json", "-count=1", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	js, err := cmd.Output()
	if err == nil {
		t.Fatal("go test passed a failing module")
	}
	var out bytes.Buffer
	// Replay slowly enough for a progress line to appear.
	r, w, _ := os.Pipe()
	go func() {
		for _, line := range strings.SplitAfter(string(js), "\n") {
			w.WriteString(line)
			if strings.Contains(line, `"Action":"start"`) && strings.Contains(line, "example.com/m/slow") {
				time.Sleep(300 * time.Millisecond)
			}
		}
		w.Close()
	}()
	if format(r, &out, 100*time.Millisecond) {
		t.Fatalf("format says everything passed:\n%s", out.String())
	}
	got := out.String()
	for _, want := range []string{
		"ok  \texample.com/m/good",            // go test's own lines stay
		"FAIL\texample.com/m/bad",             //
		"--- FAIL: TestBad",                   // the failed test's output
		"why-it-failed",                       //
		"undefined: undefined",                // the build error
		"still running: example.com/m/slow (", // progress
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"quiet-when-passing", "=== RUN   TestGood", "\nPASS\n"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("%q in:\n%s", unwanted, got)
		}
	}
}

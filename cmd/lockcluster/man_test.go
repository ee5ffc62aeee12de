package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// execRoot runs the command tree in this process with args and returns
// the tree (with the help and completion commands cobra adds when it
// runs) and what it wrote on stdout.
func execRoot(t *testing.T, args ...string) (*cobra.Command, string) {
	t.Helper()
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		t.Fatalf("lockcluster %s: %v", strings.Join(args, " "), err)
	}
	return root, out.String()
}

// manPages writes the man pages as scripts/release does, into a
// temporary directory, and returns it and the page each command that
// 'help' lists should have (lockcluster-tls-ca-create.1): hidden
// commands and help have none.
func manPages(t *testing.T) (dir string, want map[string]*cobra.Command) {
	t.Helper()
	dir = t.TempDir()
	root, _ := execRoot(t, "__man", dir)
	want = map[string]*cobra.Command{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c != root && (!c.IsAvailableCommand() || c.IsAdditionalHelpTopicCommand()) {
			return
		}
		want[strings.ReplaceAll(c.CommandPath(), " ", "-")+".1"] = c
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return dir, want
}

func TestManPages(t *testing.T) {
	dir, want := manPages(t)
	for _, must := range []string{"lockcluster.1", "lockcluster-lock.1", "lockcluster-serve.1", "lockcluster-tls-ca-create.1", "lockcluster-completion-bash.1"} {
		if want[must] == nil {
			t.Errorf("no command for %s", must)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	for _, name := range got {
		if want[name] == nil {
			t.Errorf("%s: a page for no listed command (hidden ones, like __reap and __man, and help get none)", name)
		}
	}
	for name, c := range want {
		if !slices.Contains(got, name) {
			t.Errorf("no man page %s for '%s'", name, c.CommandPath())
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		page := string(b)
		base := strings.TrimSuffix(name, ".1")
		for _, s := range []string{
			`.TH "` + strings.ToUpper(base) + `" "1"`,
			".SH NAME\n" + base + " - " + c.Short,
			".SH SYNOPSIS\n",
			"lockcluster manual",
		} {
			if !strings.Contains(page, s) {
				t.Errorf("%s has no %q:\n%s", name, s, page)
			}
		}
		if strings.Contains(page, "Auto generated") {
			t.Errorf("%s has cobra's auto-generated tag", name)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "lockcluster-lock.1")); !strings.Contains(string(b), ".SH OPTIONS") || !strings.Contains(string(b), "if-available") {
		t.Errorf("lockcluster-lock.1 lists no options:\n%s", b)
	}
}

func TestCompletions(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		_, out := execRoot(t, "completion", shell)
		if !strings.Contains(out, "lockcluster") || len(out) < 1000 {
			t.Fatalf("completion %s:\n%s", shell, out)
		}
		if shell != "bash" {
			continue
		}
		f := filepath.Join(t.TempDir(), "lockcluster.bash")
		if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		if b, err := exec.Command("bash", "-n", f).CombinedOutput(); err != nil {
			t.Fatalf("bash -n on the bash completion: %v\n%s", err, b)
		}
	}
}

package composetest

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the main module's directory, two levels up.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "docker-compose.yml")); err != nil {
		t.Fatalf("not the repository root: %v", err)
	}
	return root
}

// consult opens the files under root that the test's outcome depends on
// but that a subprocess reads (the go tool, docker), so that `go test`'s
// result cache sees their changes: it tracks the files the test process
// itself opens, not those its children open.
func consult(t *testing.T, root string, keep func(rel string, d fs.DirEntry) bool) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "dist" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if keep(filepath.ToSlash(rel), d) {
			f, err := os.Open(path)
			if err == nil {
				f.Close()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// dockerFiles are the files of the Docker support.
func dockerFile(rel string) bool {
	switch rel {
	case "Dockerfile", "docker-compose.yml", ".dockerignore", "scripts/docker-build.sh":
		return true
	}
	return false
}

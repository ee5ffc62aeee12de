package composetest

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestComposeModule runs `go test ./...` in test/compose, the nested module
// that validates docker-compose.yml with compose-go.
func TestComposeModule(t *testing.T) {
	gotool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("the go tool is not on PATH: %v", err)
	}
	root := repoRoot(t)
	dir := filepath.Join(root, "test", "compose")
	consult(t, root, func(rel string, _ fs.DirEntry) bool {
		return dockerFile(rel) || strings.HasPrefix(rel, "test/compose/")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a cold module cache downloads compose-go
	defer cancel()
	cmd := exec.CommandContext(ctx, gotool, "test", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go test ./... in test/compose: %v\n%s", err, out)
	}
	t.Logf("test/compose:\n%s", out)
}

package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// built holds one build per package directory for the test binary's life.
var built struct {
	sync.Mutex
	dirs map[string]*build
}

type build struct {
	once sync.Once
	path string
	err  error
}

// Build builds the main package in dir (relative to the test's package,
// e.g. "." or "../cmd/lockcluster") with -tags hashicorpmetrics, once per
// test binary, and returns the binary's path. A test's TestMain calls
// RemoveBuilds when m.Run returns.
func Build(t testing.TB, dir string) string {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	built.Lock()
	if built.dirs == nil {
		built.dirs = map[string]*build{}
	}
	b := built.dirs[abs]
	if b == nil {
		b = &build{}
		built.dirs[abs] = b
	}
	built.Unlock()
	b.once.Do(func() {
		tmp, err := os.MkdirTemp("", "lockcluster-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(tmp, filepath.Base(abs))
		out, err := exec.Command("go", "build", "-tags", "hashicorpmetrics", "-o", b.path, abs).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", dir, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// RemoveBuilds deletes what Build built.
func RemoveBuilds() {
	built.Lock()
	defer built.Unlock()
	for _, b := range built.dirs {
		if b.path != "" {
			os.RemoveAll(filepath.Dir(b.path))
		}
	}
}

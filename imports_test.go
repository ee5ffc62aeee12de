package lockcluster_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/lockcluster/lockcluster"

// TestImportRules pins the layering the package docs promise (issues 14
// and 22):
//
//   - fsm imports only the standard library;
//   - raftnode and session import no lockcluster package;
//   - the client (this package) imports only api/lockclusterv1 of the
//     lockcluster packages;
//   - only cmd/lockcluster and internal/node import internal/server;
//   - the CLI's client commands (every file of cmd/lockcluster but the
//     node-side ones in nodeSideFiles) import only the client and
//     api/lockclusterv1 of the lockcluster packages, as a user's program
//     would;
//   - no production code imports a package under test/, nor
//     internal/testutil (nodetest, which runs clusters inside tests, may).
//
// Only non-test files count. The imports are read from every such file of
// every package, including the files a build tag or GOOS leaves out (go
// list's IgnoredGoFiles), so a file behind divergencetest, jepsenbroken,
// hashicorpmetrics or !unix cannot add an edge the default build hides.
func TestImportRules(t *testing.T) {
	for _, e := range productionImports(t) {
		if msg := breaks(e.from, e.to, e.file); msg != "" {
			t.Errorf("%s imports %s (%s): %s", show(e.from), e.to, e.file, msg)
		}
	}
}

// nodeSideFiles are the files of cmd/lockcluster that run or build a node
// (serve, its checks at start and its reload, dev, bench, tls, offline snapshots and recovery,
// version and man pages) and may import the server's packages; every
// other file is a client command.
var nodeSideFiles = map[string]bool{
	"bench.go": true, "bootstrapcheck.go": true, "config.go": true, "dev.go": true,
	"gctune.go": true, "man.go": true, "recover.go": true, "reload.go": true,
	"sample.go": true, "serve.go": true, "snapshot.go": true, "streams.go": true,
	"tls.go": true, "version.go": true,
}

// breaks returns the rule the edge from → to, in file, breaks, or "".
func breaks(from, to, file string) string {
	inModule := to == module || strings.HasPrefix(to, module+"/")
	switch {
	case under(to, "test") && !under(from, "test"):
		return "production code must not import a package under test/"
	case from == module+"/fsm" && !standard(to):
		return "fsm must import only the standard library"
	case from == module+"/raftnode" && inModule:
		return "raftnode must import no lockcluster package"
	case from == module+"/session" && inModule:
		return "session must import no lockcluster package"
	case from == module && inModule && to != module+"/api/lockclusterv1":
		return "the client must import only api/lockclusterv1 of the lockcluster packages"
	case to == module+"/internal/server" && from != module+"/cmd/lockcluster" && from != module+"/internal/node":
		return "only cmd/lockcluster and internal/node may import internal/server"
	case to == module+"/internal/testutil" && from != module+"/internal/node/nodetest":
		return "internal/testutil is for tests (and nodetest, which runs clusters in tests)"
	case from == module+"/cmd/lockcluster" && !nodeSideFiles[path.Base(file)] && inModule &&
		to != module && to != module+"/api/lockclusterv1":
		return "a client command must import only the client and api/lockclusterv1 (node-side files: nodeSideFiles)"
	}
	return ""
}

// under reports whether path is the module's dir or below it.
func under(path, dir string) bool {
	p := module + "/" + dir
	return path == p || strings.HasPrefix(path, p+"/")
}

// standard reports whether path is in the standard library: as the go
// command has it, its first element has no dot.
func standard(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

func show(pkg string) string {
	if pkg == module {
		return "lockcluster (the client)"
	}
	return strings.TrimPrefix(pkg, module+"/")
}

type edge struct{ from, to, file string }

// productionImports lists an edge per import of each non-test file of
// each package of the module, whatever its build constraints.
func productionImports(t *testing.T) []edge {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-tags", "hashicorpmetrics,divergencetest,jepsenbroken",
		"-json=ImportPath,Dir,GoFiles,CgoFiles,IgnoredGoFiles,Error", "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	var edges []edge
	seen := map[string]bool{}
	fset := token.NewFileSet()
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath, Dir                   string
			GoFiles, CgoFiles, IgnoredGoFiles []string
			Error                             *struct{ Err string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Error != nil {
			t.Errorf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		seen[p.ImportPath] = true
		files := append(append(p.GoFiles, p.CgoFiles...), p.IgnoredGoFiles...)
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") || !strings.HasSuffix(name, ".go") {
				continue
			}
			path := filepath.Join(p.Dir, name)
			f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			for _, imp := range f.Imports {
				to, err := strconv.Unquote(imp.Path.Value)
				if err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				rel, _ := filepath.Rel(root, path)
				edges = append(edges, edge{p.ImportPath, to, filepath.ToSlash(rel)})
			}
		}
	}
	for _, p := range []string{module, module + "/fsm", module + "/raftnode", module + "/session", module + "/cmd/lockcluster"} {
		if !seen[p] {
			t.Fatalf("go list did not list %s: the rules read nothing", p)
		}
	}
	return edges
}

// publicPackages are the importable packages outside internal/ and test/,
// with what the README's package table promises of each. A new package
// outside internal/ must be added here and to that table on purpose.
var publicPackages = map[string]string{
	module:                        "stable: the Go client",
	module + "/api/lockclusterv1": "stable: the wire contract",
	module + "/fsm":               "public, unstable: the Web Locks state machine",
	module + "/fsm/raftfsm":       "public, unstable: fsm's adapter to hashicorp/raft",
	module + "/raftnode":          "public, unstable: a hardened raft member",
	module + "/session":           "public, unstable: session liveness",
	module + "/deploy":            "exports nothing: the tests of the deploy files",
}

// TestPublicSurface fails for an importable package outside internal/ and
// test/ that publicPackages does not list: the compiler, not the README,
// keeps the server's packages private (issue 22).
func TestPublicSurface(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "hashicorpmetrics", "-f", "{{.ImportPath}} {{.Name}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, name, _ := strings.Cut(line, " ")
		if name == "main" || under(pkg, "internal") || under(pkg, "test") {
			continue
		}
		if _, ok := publicPackages[pkg]; !ok {
			t.Errorf("%s is importable outside internal/ and test/ but not one of the public packages (imports_test.go publicPackages, README's package table): move it under internal/", show(pkg))
		}
	}
}

package main

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/version"
)

func versionOf(t *testing.T, bin string) version.Info {
	t.Helper()
	out, err := exec.Command(bin, "version", "-o", "json").Output()
	var b version.Info
	if err != nil || json.Unmarshal(out, &b) != nil {
		t.Fatalf("%s version -o json: %v: %s", bin, err, out)
	}
	return b
}

func TestVersion(t *testing.T) {
	pc := startProcs(t, 3)
	b := versionOf(t, pc.bin)
	if b.Version == "" || b.Revision == "" || b.GoVersion != runtime.Version() {
		t.Fatalf("version -o json: %+v (Go %s)", b, runtime.Version())
	}
	out, code := run(t, pc, "--version")
	if code != 0 || !strings.Contains(out, b.Version) || !strings.Contains(out, b.Revision) || !strings.Contains(out, b.GoVersion) {
		t.Fatalf("--version: exit %d: %s", code, out)
	}
	if out2, _ := run(t, pc, "version"); out2 != out {
		t.Fatalf("version %q and --version %q differ", out2, out)
	}

	t.Run("status and members show each node's version", func(t *testing.T) {
		pc.directoryComplete(10 * time.Second)
		out, code := run(t, pc, "status", "-o", "json")
		var sts []lockcluster.Status
		if code != 0 || json.Unmarshal([]byte(out), &sts) != nil || len(sts) != 3 {
			t.Fatalf("status: exit %d: %s", code, out)
		}
		for _, s := range sts {
			if s.Version != b.Version {
				t.Fatalf("status: %s reports version %q, want %q", s.NodeID, s.Version, b.Version)
			}
		}
		out, code = run(t, pc, "members", "-o", "json")
		var ms []lockcluster.Member
		if code != 0 || json.Unmarshal([]byte(out), &ms) != nil || len(ms) != 3 {
			t.Fatalf("members: exit %d: %s", code, out)
		}
		for _, m := range ms {
			if m.Version != b.Version || m.ID == "" {
				t.Fatalf("members: %s", out)
			}
		}
		if out, _ := run(t, pc, "members"); !strings.Contains(out, "VERSION") || strings.Count(out, b.Version) != 3 {
			t.Fatalf("members: %s", out)
		}
	})

	t.Run("lockcluster_build_info", func(t *testing.T) {
		resp, err := http.Get("http://" + pc.Nodes[0].HTTP + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := fmt.Sprintf(`lockcluster_build_info{goversion=%q,revision=%q,version=%q} 1`, b.GoVersion, b.Revision, b.Version)
		if !strings.Contains(string(body), want) {
			t.Fatalf("/metrics has no %s", want)
		}
	})
}

// TestRelease runs scripts/release for this machine's platform and checks
// what it made: the checksums, the version linked in, a static binary.
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a release binary")
	}
	dist := t.TempDir()
	target := runtime.GOOS + "/" + runtime.GOARCH
	cmd := exec.Command("../../scripts/release", "v0.0.0-test")
	cmd.Env = append(os.Environ(), "TARGETS="+target, "DIST="+dist)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release: %v\n%s", err, out)
	}
	name := "lockcluster-v0.0.0-test-" + runtime.GOOS + "-" + runtime.GOARCH
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dist, name)
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(data)
	if want := hex.EncodeToString(h[:]) + "  " + name + "\n"; string(sums) != want {
		t.Fatalf("SHA256SUMS:\n%s\nwant:\n%s", sums, want)
	}
	b := versionOf(t, bin)
	if b.Version != "v0.0.0-test" || b.Revision == "dev" || b.Revision == "" || b.GoVersion != runtime.Version() {
		t.Fatalf("the release binary says %+v", b)
	}
	if runtime.GOOS == "linux" {
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Fatal("the release binary is dynamically linked (it has an ELF interpreter)")
			}
		}
	}
}

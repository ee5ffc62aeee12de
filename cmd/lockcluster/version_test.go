package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
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

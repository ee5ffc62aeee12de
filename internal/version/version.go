// Package version owns what a lockcluster binary knows of its build: the
// version and revision scripts/release links in, else the Go toolchain's
// build info (module version, VCS revision), else "dev". The CLI prints
// it, Cluster/Status reports it, and /metrics exports it as
// lockcluster_build_info.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
)

// version and revision are set by scripts/release:
//
//	-ldflags "-X github.com/lockcluster/lockcluster/internal/version.version=v1.2.3
//	          -X github.com/lockcluster/lockcluster/internal/version.revision=<commit>"
var version, revision string

// Info describes the running binary.
type Info struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	GoVersion string `json:"goVersion"`
}

// Current returns the running binary's build: the linker's values first,
// then the toolchain's build info, then "dev".
var Current = sync.OnceValue(current)

func current() Info {
	b := Info{Version: version, Revision: revision, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		if b.Revision == "" {
			b.Revision = vcsRevision(bi.Settings)
		}
		if bi.GoVersion != "" {
			b.GoVersion = bi.GoVersion
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	if b.Revision == "" {
		b.Revision = "dev"
	}
	return b
}

// vcsRevision is the commit the go command stamped, "-dirty" when the
// work tree had changes.
func vcsRevision(settings []debug.BuildSetting) string {
	rev, dirty := "", false
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" && dirty {
		rev += "-dirty"
	}
	return rev
}

func (b Info) String() string {
	return fmt.Sprintf("lockcluster %s (revision %s, %s %s/%s)", b.Version, b.Revision, b.GoVersion, runtime.GOOS, runtime.GOARCH)
}

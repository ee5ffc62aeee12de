package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/lockcluster/lockcluster/api/metrics"
	"github.com/lockcluster/lockcluster/api/server"
)

// version and revision are set by scripts/release:
// -ldflags "-X main.version=v1.2.3 -X main.revision=<commit>".
var version, revision string

// buildInfo is what this binary knows of its build: the linker's values
// first, then the Go toolchain's build info (module version, VCS
// revision), then "dev".
type buildInfo struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	GoVersion string `json:"goVersion"`
}

func currentBuild() buildInfo {
	b := buildInfo{Version: version, Revision: revision, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		if b.Revision == "" {
			rev, dirty := "", false
			for _, s := range bi.Settings {
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
			b.Revision = rev
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

func (b buildInfo) String() string {
	return fmt.Sprintf("lockcluster %s (revision %s, %s %s/%s)", b.Version, b.Revision, b.GoVersion, runtime.GOOS, runtime.GOARCH)
}

// announceBuild tells the node's packages which build they run: Status
// reports the version, /metrics lockcluster_build_info.
func announceBuild() buildInfo {
	b := currentBuild()
	server.Version = b.Version
	metrics.Build = metrics.BuildInfo{Version: b.Version, Revision: b.Revision, GoVersion: b.GoVersion}
	return b
}

func newVersion(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print lockcluster's version, git revision and Go version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if err := g.checkOutput(); err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(os.Stdout, currentBuild())
			}
			fmt.Println(currentBuild())
			return nil
		},
	}
}

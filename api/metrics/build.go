package metrics

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
)

// BuildInfo describes the running binary.
type BuildInfo struct {
	Version, Revision, GoVersion string
}

// Build is what lockcluster_build_info says; the binary sets it before New.
var Build = BuildInfo{Version: "dev", Revision: "dev", GoVersion: runtime.Version()}

// buildInfo is lockcluster_build_info{version,revision,goversion} 1, as
// Prometheus' own *_build_info: join on it to see which build a series came from.
func buildInfo() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "lockcluster_build_info",
		Help:        "A metric with a constant '1' value labeled by version, revision and goversion from which lockcluster was built.",
		ConstLabels: prometheus.Labels{"version": Build.Version, "revision": Build.Revision, "goversion": Build.GoVersion},
	}, func() float64 { return 1 })
}

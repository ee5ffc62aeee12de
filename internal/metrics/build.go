package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockcluster/lockcluster/internal/version"
)

// buildInfo is lockcluster_build_info{version,revision,goversion} 1, as
// Prometheus' own *_build_info: join on it to see which build a series came from.
func buildInfo() prometheus.Collector {
	b := version.Current()
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "lockcluster_build_info",
		Help:        "A metric with a constant '1' value labeled by version, revision and goversion from which lockcluster was built.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion},
	}, func() float64 { return 1 })
}

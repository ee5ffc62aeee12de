package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func newBackupGauge() prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "lockcluster_last_backup_timestamp_seconds",
		Help: "When this node last served a SaveSnapshot (lockcluster snapshot save, an online backup) to its end, as the node the client called: the leader that encoded it or a follower that relayed the leader's stream (Unix time); 0 if it has not since it started. Take the max over the nodes.",
	})
}

// BackupSaved implements internal/server's BackupObserver: this node
// served a backup, at at.
func (m *Metrics) BackupSaved(at time.Time) {
	m.backup.Set(float64(at.UnixNano()) / 1e9)
}

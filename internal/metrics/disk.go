package metrics

import "github.com/prometheus/client_golang/prometheus"

// diskCollector reads the raft log's disk at scrape time (ReplicaHealth:
// raftnode's statfs of the log's directory and the size of its files).
// The free and size gauges are left out where the file system's space is
// unknown (statfs failed, or not Linux): a 0 would read as a full disk.
type diskCollector struct {
	r                 ReplicaHealth
	free, size, bytes *prometheus.Desc
}

func newDiskCollector(r ReplicaHealth) *diskCollector {
	path := prometheus.Labels{"path": label(r.LogDir())}
	return &diskCollector{
		r: r,
		free: prometheus.NewDesc("lockcluster_disk_free_bytes",
			"Bytes free for this node on the file system that holds its raft log (statfs f_bavail of path, the log's directory); when it cannot take a new log segment, the node fences itself (storage).", nil, path),
		size: prometheus.NewDesc("lockcluster_disk_size_bytes",
			"Size in bytes of the file system that holds this node's raft log (path, the log's directory).", nil, path),
		bytes: prometheus.NewDesc("lockcluster_log_bytes",
			"Bytes of this node's raft log files in path: raft-wal's segments (each preallocated whole) and metadata, or raft.db with the bolt log store. Snapshots compact it; a log that keeps growing means they do not.", nil, path),
	}
}

func (c *diskCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.free
	ch <- c.size
	ch <- c.bytes
}

func (c *diskCollector) Collect(ch chan<- prometheus.Metric) {
	if free, total, known := c.r.DiskSpace(); known {
		ch <- prometheus.MustNewConstMetric(c.free, prometheus.GaugeValue, float64(free))
		ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(total))
	}
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(c.r.LogBytes()))
}

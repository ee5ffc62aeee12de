package raftnode

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

// The log's directory, the size of its files and the space of its file
// system, as the metrics read them: raft-wal's directory and segments, or
// raft.db with the bolt log.
func TestDiskUsage(t *testing.T) {
	for _, kind := range []string{LogStoreWAL, LogStoreBolt} {
		t.Run(kind, func(t *testing.T) {
			c := newCluster(t, 1, func(cfg *Config) { cfg.LogStore = kind })
			tn := c.nodes[0]
			n := tn.node
			want, file := filepath.Join(tn.dir, "wal"), ""
			if kind == LogStoreBolt {
				want, file = tn.dir, "raft.db"
			}
			if got := n.LogDir(); got != want {
				t.Errorf("LogDir: %s, want %s", got, want)
			}
			// The leader's first entries may still be written: compare
			// until two readings agree.
			var got, size uint64
			testutil.Eventually(t, 5*time.Second, "LogBytes to be the size of the log's files", func() bool {
				got, size = n.LogBytes(), 0
				entries, err := os.ReadDir(want)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range entries {
					if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && (file == "" || e.Name() == file) {
						size += uint64(fi.Size())
					}
				}
				return got > 0 && got == size
			})
			free, total, known := n.DiskSpace()
			if runtime.GOOS == "linux" && (!known || total == 0 || free > total) {
				t.Errorf("DiskSpace: free %d, total %d, known %v", free, total, known)
			}
		})
	}
}

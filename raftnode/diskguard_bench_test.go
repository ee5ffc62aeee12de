//go:build linux

package raftnode

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

// BenchmarkWALAppend compares one-entry appends to raft-wal alone and
// behind the disk guard, on a tmpfs (root) so that fsync does not drown
// the difference, else in a temporary directory. Run the two alternately
// (-count) and compare with benchstat.
//
//	go test -tags hashicorpmetrics -run '^$' -bench BenchmarkWALAppend -count 10 ./raftnode/
func BenchmarkWALAppend(b *testing.B) {
	open := walDirs
	run := func(b *testing.B, store raft.LogStore) {
		data := make([]byte, 100)
		logs := []*raft.Log{{Term: 1, Type: raft.LogCommand, Data: data}}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			logs[0].Index = uint64(i + 1)
			if err := store.StoreLogs(logs); err != nil {
				b.Fatal(err)
			}
		}
	}
	benchStores(b, open, run)
}

// BenchmarkWALGetLog compares reads from several goroutines, as raft's
// goroutines read, from raft-wal alone and behind the disk guard.
func BenchmarkWALGetLog(b *testing.B) {
	const n = 10000
	run := func(b *testing.B, store raft.LogStore) {
		data := make([]byte, 100)
		for i := uint64(1); i <= n; i++ {
			if err := store.StoreLogs([]*raft.Log{{Index: i, Term: 1, Type: raft.LogCommand, Data: data}}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			var l raft.Log
			i := uint64(0)
			for pb.Next() {
				i++
				if err := store.GetLog(1+i%n, &l); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	benchStores(b, walDirs, run)
}

func walDirs(b *testing.B) (string, func() (*wal.WAL, error)) {
	dir := b.TempDir()
	if os.Geteuid() == 0 {
		dir = testutil.Tmpfs(b, 512<<20)
	}
	dir = filepath.Join(dir, "wal")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	return dir, func() (*wal.WAL, error) { return wal.Open(dir, wal.WithSegmentSize(64<<20)) }
}

func benchStores(b *testing.B, open func(*testing.B) (string, func() (*wal.WAL, error)), run func(*testing.B, raft.LogStore)) {
	b.Run("raw", func(b *testing.B) {
		_, open := open(b)
		w, err := open()
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		run(b, w)
	})
	b.Run("guard", func(b *testing.B) {
		dir, open := open(b)
		g, err := newDiskGuard(dir, 64<<20, open, hclog.NewNullLogger())
		if err != nil {
			b.Fatal(err)
		}
		defer g.Close()
		run(b, g)
	})
}

// BenchmarkDiskGuardOverhead isolates what the guard adds to a call: on a
// closed WAL raft-wal returns at once (wal.go, checkClosed), so what is
// left is the guard's own work (a read lock and three atomic loads).
func BenchmarkDiskGuardOverhead(b *testing.B) {
	dir, open := walDirs(b)
	g, err := newDiskGuard(dir, 64<<20, open, hclog.NewNullLogger())
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	g.w.Close()
	logs := []*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: make([]byte, 100)}}
	b.Run("raw", func(b *testing.B) {
		for range b.N {
			g.w.StoreLogs(logs)
		}
	})
	b.Run("guard", func(b *testing.B) {
		for range b.N {
			g.StoreLogs(logs)
		}
	})
}

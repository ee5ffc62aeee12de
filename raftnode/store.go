package raftnode

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"
	gometrics "github.com/hashicorp/go-metrics/compat"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	walmetrics "github.com/hashicorp/raft-wal/metrics"
	"github.com/hashicorp/raft-wal/migrate"
	"go.etcd.io/bbolt"
)

// The log stores (Config.LogStore).
const (
	// LogStoreWAL is github.com/hashicorp/raft-wal: one fsync per append,
	// segment files under DataDir/wal. The default.
	LogStoreWAL = "wal"
	// LogStoreBolt is the log in DataDir/raft.db (raft-boltdb): two fsyncs
	// per append (bbolt's data and meta pages).
	LogStoreBolt = "bolt"
)

// stores are the node's persistent stores: the stable store (term, vote)
// is always raft.db; the log is raft-wal's or raft.db's.
type stores struct {
	stable   *raftboltdb.BoltStore // raft.db
	checked  *checkedStable        // stable behind its shadow record (stablecheck.go): what raft uses
	logs     raft.LogStore         // behind a LogCache; monotonic
	sums     *checkedLogs          // the log's checksums (logcheck.go), under the cache
	damage   []*storageDamage      // what the checks at open found
	dropFrom uint64                // the first log index to drop as damaged (0: none)
	wal      *diskGuard            // raft-wal, reopened after a full disk (diskguard.go); nil with the bolt log
	lock     *os.File              // the data directory's lock
}

// openStores locks the data directory and opens the stores. A directory
// whose log is still in raft.db (written before raft-wal, or with
// LogStoreBolt) is migrated once into the WAL when kind is LogStoreWAL.
func openStores(dir, kind string, wo walOptions, logger hclog.Logger) (st *stores, err error) {
	st = &stores{}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	if st.lock, err = lockDir(dir); err != nil {
		return st, err
	}
	boltPath := filepath.Join(dir, "raft.db")
	// bbolt's meta pages are checked before bbolt opens the file: its
	// first commit would overwrite a bad page and hide a rollback.
	metaDamage, err := checkBoltMeta(boltPath)
	if err != nil {
		return st, err
	}
	st.stable, err = raftboltdb.New(raftboltdb.Options{
		Path: boltPath,
		// The freelist is rebuilt from the pages when the file is opened, so
		// it need not be written on every commit: fewer pages to write and
		// fsync per append (etcd does the same). Durability is unchanged:
		// every commit still fsyncs its data and meta pages.
		BoltOptions: &bbolt.Options{Timeout: boltOpenTimeout, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
		NoSync:      false, // fsync every append: acknowledged entries survive a crash
	})
	if err != nil {
		return st, fmt.Errorf("raftnode: open %s: %w", boltPath, err)
	}
	var stableDamage *storageDamage
	if st.checked, stableDamage, err = newCheckedStable(st.stable, dir, metaDamage, logger); err != nil {
		return st, err
	}
	st.addDamage(stableDamage)
	walDir := filepath.Join(dir, "wal")
	_, statErr := os.Stat(walDir)
	hasWAL := statErr == nil
	var log raft.LogStore
	switch kind {
	case LogStoreBolt:
		if hasWAL {
			return st, fmt.Errorf("raftnode: LogStore=%q: the log of %s is in %s (raft-wal); a data directory does not go back to bolt", kind, dir, walDir)
		}
		log = st.stable
	case LogStoreWAL, "":
		if !hasWAL {
			if err := migrateToWAL(dir, st.stable, wo, logger); err != nil {
				return st, err
			}
		}
		if st.wal, err = openWAL(walDir, wo, logger); err != nil {
			return st, err
		}
		if err := dropBoltLog(st.stable, logger); err != nil {
			return st, err
		}
		log = st.wal
	default:
		return st, fmt.Errorf("raftnode: invalid config: LogStore=%q: want %q or %q", kind, LogStoreWAL, LogStoreBolt)
	}
	if err := st.checkLog(dir, walDir, boltPath, log); err != nil {
		return st, err
	}
	var under raft.LogStore = st.sums // monotonic: raft removes every old entry after installing a snapshot
	if !workarounds.monotonicLogs && st.wal == nil {
		under = plainLogs{st.sums} // tests that show the library alone
	}
	cache, err := raft.NewLogCache(logCacheSize, under)
	if err != nil {
		return st, fmt.Errorf("raftnode: log cache: %w", err)
	}
	st.logs = cache
	return st, nil
}

// checkLog wraps the log in its checksums and verifies it before anything
// is appended (an append would overwrite the evidence): raft-wal's tail
// segment for committed batches its recovery dropped (walscan.go), then
// every entry's checksum, index and term (logcheck.go). A damaged suffix
// is dropped once the damage is recorded (dropDamagedSuffix); the node is
// fenced until repaired (repair.go).
func (st *stores) checkLog(dir, walDir, boltPath string, log raft.LogStore) error {
	path := boltPath
	if st.wal != nil {
		path = walDir
		last, err := log.LastIndex()
		if err != nil {
			return fmt.Errorf("raftnode: reading the log: %w", err)
		}
		d, err := scanWALTail(walDir, last)
		if err != nil {
			return fmt.Errorf("raftnode: checking the raft-wal tail in %s: %w", walDir, err)
		}
		st.addDamage(d)
	}
	sums, err := newCheckedLogs(log, dir, path)
	var d *storageDamage
	if errors.As(err, &d) {
		st.addDamage(d)
		return fmt.Errorf("raftnode: %w (move %s aside only if you know why it is damaged)", err, filepath.Join(dir, logSumsFile))
	}
	if err != nil {
		return err
	}
	st.sums = sums
	d, err = verifyLog(sums)
	if err != nil {
		return fmt.Errorf("raftnode: verifying the log in %s: %w", path, err)
	}
	if d == nil {
		return nil
	}
	st.addDamage(d)
	st.dropFrom = d.Index
	return nil
}

// dropDamagedSuffix deletes the log from the first damaged entry on. The
// damage must be recorded first (DataDir/DAMAGED): the deletion overwrites
// the evidence, and a crash in between must not forget it.
func (st *stores) dropDamagedSuffix() error {
	if st.dropFrom == 0 {
		return nil
	}
	last, err := st.sums.LastIndex()
	if err != nil {
		return fmt.Errorf("raftnode: reading the log: %w", err)
	}
	if last >= st.dropFrom {
		if err := st.sums.DeleteRange(st.dropFrom, last); err != nil {
			return fmt.Errorf("raftnode: dropping the damaged log suffix %d-%d: %w", st.dropFrom, last, err)
		}
	}
	st.dropFrom = 0
	return nil
}

func (st *stores) addDamage(d *storageDamage) {
	if d != nil {
		st.damage = append(st.damage, d)
	}
}

// plainLogs hides a store's IsMonotonic.
type plainLogs struct{ raft.LogStore }

// openWAL opens the raft-wal log in dir behind a diskGuard. Its segments
// are smaller than raft-wal's 64 MiB when the disk has little room
// (segmentSizeFor); a disk with too little refuses to start.
// walOptions are the Config fields that shape the raft-wal log.
type walOptions struct {
	segmentSize int               // Config.WALSegmentSize: the cap (0: raft-wal's default)
	labels      map[string]string // Config.WALMetricLabels
}

func (c *Config) walOptions() walOptions {
	return walOptions{segmentSize: c.WALSegmentSize, labels: c.WALMetricLabels}
}

func openWAL(dir string, wo walOptions, logger hclog.Logger) (*diskGuard, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("raftnode: %w", err)
	}
	removeProbes(dir) // before measuring the free space they hold
	segSize, err := segmentSizeFor(dir)
	if err != nil {
		return nil, err
	}
	if segSize != wal.DefaultSegmentSize {
		logger.Warn("little free space for the raft log: smaller raft-wal segments", "path", dir, "segment_size", fmtBytes(uint64(segSize)))
	}
	if wo.segmentSize > 0 {
		segSize = min(segSize, wo.segmentSize)
	}
	// raft-wal's counters and gauges go to go-metrics' global instance,
	// with raft's own metrics: /metrics shows them as lockcluster_raft_wal_*,
	// labelled as the node's Config says.
	var labels []gometrics.Label
	for _, k := range slices.Sorted(maps.Keys(wo.labels)) {
		labels = append(labels, gometrics.Label{Name: k, Value: wo.labels[k]})
	}
	mc := walmetrics.NewGoMetricsCollector([]string{"raft", "wal"}, labels, nil)
	open := func() (*wal.WAL, error) {
		return wal.Open(dir, wal.WithLogger(logger.Named("wal")), wal.WithMetricsCollector(mc), wal.WithSegmentSize(segSize))
	}
	g, err := newDiskGuard(dir, segSize, open, logger)
	if err != nil {
		return nil, fmt.Errorf("raftnode: open the raft-wal log in %s: %w", dir, err)
	}
	return g, nil
}

// migrateToWAL copies the log in raft.db, if it has one, into a new WAL,
// and moves it into place only once it is complete: a node stopped during
// the copy starts it over.
func migrateToWAL(dir string, bolt *raftboltdb.BoltStore, wo walOptions, logger hclog.Logger) error {
	first, err := bolt.FirstIndex()
	if err != nil {
		return fmt.Errorf("raftnode: reading the bolt log: %w", err)
	}
	last, err := bolt.LastIndex()
	if err != nil {
		return fmt.Errorf("raftnode: reading the bolt log: %w", err)
	}
	if last == 0 {
		return nil // nothing to move: a new node, or one with only snapshots
	}
	tmp := filepath.Join(dir, "wal.migrating")
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("raftnode: %w", err)
	}
	logger.Info("moving the raft log from raft.db into raft-wal (once)", "first", first, "last", last)
	w, err := openWAL(tmp, wo, logger)
	if err != nil {
		return err
	}
	err = migrate.CopyLogs(context.Background(), w, bolt, 4<<20, nil)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("raftnode: moving the log into raft-wal: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "wal")); err != nil {
		return fmt.Errorf("raftnode: %w", err)
	}
	if d, err := os.Open(dir); err == nil { // make the rename durable
		d.Sync()
		d.Close()
	}
	logger.Info("the raft log is in raft-wal now", "entries", last-first+1)
	return nil
}

// dropBoltLog deletes the log left in raft.db once the WAL holds it.
func dropBoltLog(bolt *raftboltdb.BoltStore, logger hclog.Logger) error {
	first, err := bolt.FirstIndex()
	if err != nil {
		return fmt.Errorf("raftnode: reading the bolt log: %w", err)
	}
	last, err := bolt.LastIndex()
	if err != nil || last == 0 {
		return err
	}
	if err := bolt.DeleteRange(first, last); err != nil {
		return fmt.Errorf("raftnode: deleting the migrated bolt log: %w", err)
	}
	logger.Info("deleted the old log in raft.db, now in raft-wal", "first", first, "last", last)
	return nil
}

func (s *stores) close() error {
	var errs []error
	if s.wal != nil {
		errs = append(errs, s.wal.Close())
	}
	if s.checked != nil {
		errs = append(errs, s.checked.close())
	}
	if s.stable != nil {
		errs = append(errs, s.stable.Close())
	}
	if s.lock != nil {
		errs = append(errs, unlockDir(s.lock))
	}
	return errors.Join(errs...)
}

// lockFile is the data directory's lock: one node process at a time.
const lockFile = "LOCK"

// lockDir takes an exclusive lock on dir (flock on dir/LOCK), so that two
// nodes never share a data directory; the lock goes with the process. The
// file holds the pid of its holder, for the error message.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("raftnode: %w", err)
	}
	if err := flock(f); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		holder := strings.TrimSpace(string(b))
		if holder == "" {
			holder = "another process"
		} else {
			holder = "process " + holder
		}
		return nil, fmt.Errorf("raftnode: data directory %s is in use by %s (%s is locked): one node per data directory", dir, holder, path)
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, nil
}

func unlockDir(f *os.File) error {
	funlock(f)
	return f.Close()
}

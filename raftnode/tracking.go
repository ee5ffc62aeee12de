package raftnode

import (
	"io"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// trackingFSM wraps the user's FSM to learn which log index the FSM has
// actually applied. raft.AppliedIndex is not that: it advances when raft
// hands entries to the FSM goroutine, before the FSM has consumed them.
//
// It always implements raft.BatchingFSM, so raft hands it every command and
// configuration entry. The only entries it never sees are no-ops (one at
// the start of each term) and barriers; ReadBarrier deals with those.
//
// It also keeps the running hash of everything applied (chain.go) and
// consumes the checkpoint and anchor entries (checkpoint.go), which the
// inner FSM never sees.
type trackingFSM struct {
	inner   raft.FSM
	batch   raft.BatchingFSM        // inner, if it batches
	configs raft.ConfigurationStore // inner, if it stores configurations
	logger  hclog.Logger

	index atomic.Uint64 // every entry <= index is reflected in inner

	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever index advances
	chain   chain         // written on raft's FSM goroutine, under mu

	// onCheckpoint is called, on the FSM goroutine and outside mu, with
	// the outcome of every checkpoint this node could verify (nil: equal).
	onCheckpoint func(index uint64, mismatch error)
	// sinceCheckpoint counts entries applied since the last checkpoint.
	sinceCheckpoint atomic.Uint64
}

func newTrackingFSM(inner raft.FSM, logger hclog.Logger) *trackingFSM {
	f := &trackingFSM{inner: inner, logger: logger, changed: make(chan struct{})}
	f.batch, _ = inner.(raft.BatchingFSM)
	f.configs, _ = inner.(raft.ConfigurationStore)
	return f
}

var _ raft.BatchingFSM = (*trackingFSM)(nil)

// Apply is part of raft.FSM; raft calls ApplyBatch instead.
func (f *trackingFSM) Apply(l *raft.Log) any {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch folds every entry into the chain, consumes checkpoints and
// anchors, and forwards the rest to the inner FSM exactly as raft would
// have: a batching FSM gets the whole batch; otherwise commands go to
// Apply and configurations to StoreConfiguration if implemented.
func (f *trackingFSM) ApplyBatch(logs []*raft.Log) []any {
	if len(logs) == 0 {
		return nil
	}
	var verdicts []checkpointVerdict
	last := -1 // position of the last checkpoint or anchor in logs
	f.mu.Lock()
	for i, l := range logs {
		cp, ok := parseCheckpoint(l)
		switch {
		case !ok:
			f.chain.fold(l)
			continue
		case cp.anchor:
			f.chain.reset(l)
		default:
			verdicts = append(verdicts, f.verify(cp, l.Index))
			f.chain.fold(l)
		}
		last = i
	}
	f.mu.Unlock()

	var out []any
	if last < 0 {
		out = f.applyInner(logs)
		f.sinceCheckpoint.Add(uint64(len(logs)))
	} else {
		out = make([]any, len(logs))
		var inner []*raft.Log
		var pos []int
		for i, l := range logs {
			if _, ok := parseCheckpoint(l); !ok {
				inner, pos = append(inner, l), append(pos, i)
			}
		}
		for k, r := range f.applyInner(inner) {
			out[pos[k]] = r
		}
		f.sinceCheckpoint.Store(uint64(len(logs) - 1 - last))
	}
	f.advance(logs[len(logs)-1].Index)
	if f.onCheckpoint != nil {
		for _, v := range verdicts {
			if v.checked {
				f.onCheckpoint(v.at, v.mismatch)
			}
		}
	}
	return out
}

func (f *trackingFSM) applyInner(logs []*raft.Log) []any {
	if len(logs) == 0 {
		return nil
	}
	if f.batch != nil {
		return f.batch.ApplyBatch(logs)
	}
	out := make([]any, len(logs))
	for i, l := range logs {
		switch l.Type {
		case raft.LogCommand:
			out[i] = f.inner.Apply(l)
		case raft.LogConfiguration:
			if f.configs != nil {
				f.configs.StoreConfiguration(l.Index, raft.DecodeConfiguration(l.Data))
			}
		}
	}
	return out
}

// Snapshot captures the inner FSM's snapshot and the chain at the same
// point (both on raft's FSM goroutine); the chain is written first.
func (f *trackingFSM) Snapshot() (raft.FSMSnapshot, error) {
	snap, err := f.inner.Snapshot()
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	h := f.chain.header()
	f.mu.Unlock()
	return chainSnapshot{FSMSnapshot: snap, header: h}, nil
}

// Restore restores the inner FSM and sets index to the snapshot's index,
// which it finds on the reader opened by trackingSnapshots.Open (raft opens
// the snapshot and passes the reader, possibly wrapped, to Restore).
func (f *trackingFSM) Restore(rc io.ReadCloser) error {
	c, rest, withChain, err := readChainHeader(rc)
	if err != nil {
		rc.Close()
		return err
	}
	if err := f.inner.Restore(readCloser{rest, rc}); err != nil {
		return err
	}
	index, found := snapshotIndex(rc)
	if !found {
		f.logger.Warn("restored a snapshot of unknown index; AppliedIndex and ReadBarrier may lag until the next entry")
		index = c.index
	}
	if !withChain {
		f.logger.Warn("restored a snapshot written before applied-entry hashes existed: this node's hash chain is unknown until the leader's next anchor entry", "index", index)
		c = chain{index: index}
	}
	f.mu.Lock()
	c.plant = f.chain.plant
	f.chain = c
	f.mu.Unlock()
	f.set(index)
	return nil
}

// snapshotIndex finds the index trackingSnapshots.Open tagged the reader
// with (raft opens the snapshot and passes the reader, possibly wrapped,
// to Restore).
func snapshotIndex(rc io.ReadCloser) (uint64, bool) {
	r := rc
	for {
		if sr, ok := r.(*snapshotReader); ok {
			return sr.index, true
		}
		w, ok := r.(raft.ReadCloserWrapper)
		if !ok {
			return 0, false
		}
		r = w.WrappedReadCloser()
	}
}

// readCloser reads from one reader and closes another.
type readCloser struct {
	io.Reader
	c io.Closer
}

func (r readCloser) Close() error { return r.c.Close() }

// Chain returns the chain's state: the last index folded in, its value, and
// whether this node knows its chain.
func (f *trackingFSM) Chain() (index uint64, hash [32]byte, known bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.chain.index, f.chain.hash, f.chain.known
}

// ChainAt returns the chain's value as of index i, or why it cannot.
func (f *trackingFSM) ChainAt(i uint64) ([32]byte, bool, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.chain.at(i)
}

// Index returns the highest index whose entries are all reflected in the FSM.
func (f *trackingFSM) Index() uint64 { return f.index.Load() }

// Changed returns a channel closed at the next advance of Index.
func (f *trackingFSM) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

// advance raises index to i (never lowers it).
func (f *trackingFSM) advance(i uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i <= f.index.Load() {
		return
	}
	f.index.Store(i)
	close(f.changed)
	f.changed = make(chan struct{})
}

// set replaces index after a restore.
func (f *trackingFSM) set(i uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index.Store(i)
	close(f.changed)
	f.changed = make(chan struct{})
}

// trackingSnapshots tags every snapshot reader it opens with the
// snapshot's index, for trackingFSM.Restore.
type trackingSnapshots struct {
	raft.SnapshotStore
}

func (s trackingSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.SnapshotStore.Open(id)
	if err != nil {
		return meta, rc, err
	}
	return meta, &snapshotReader{ReadCloser: rc, index: meta.Index}, nil
}

type snapshotReader struct {
	io.ReadCloser
	index uint64
}

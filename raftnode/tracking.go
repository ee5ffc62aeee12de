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
type trackingFSM struct {
	inner   raft.FSM
	batch   raft.BatchingFSM        // inner, if it batches
	configs raft.ConfigurationStore // inner, if it stores configurations
	logger  hclog.Logger

	index atomic.Uint64 // every entry <= index is reflected in inner

	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever index advances
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

// ApplyBatch forwards to the inner FSM, exactly as raft would have: a
// batching FSM gets the whole batch; otherwise commands go to Apply and
// configurations to StoreConfiguration if implemented.
func (f *trackingFSM) ApplyBatch(logs []*raft.Log) []any {
	if len(logs) == 0 {
		return nil
	}
	var out []any
	if f.batch != nil {
		out = f.batch.ApplyBatch(logs)
	} else {
		out = make([]any, len(logs))
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
	}
	f.advance(logs[len(logs)-1].Index)
	return out
}

func (f *trackingFSM) Snapshot() (raft.FSMSnapshot, error) { return f.inner.Snapshot() }

// Restore restores the inner FSM and sets index to the snapshot's index,
// which it finds on the reader opened by trackingSnapshots.Open (raft opens
// the snapshot and passes the reader, possibly wrapped, to Restore).
func (f *trackingFSM) Restore(rc io.ReadCloser) error {
	if err := f.inner.Restore(rc); err != nil {
		return err
	}
	var r io.ReadCloser = rc
	for {
		if sr, ok := r.(*snapshotReader); ok {
			f.set(sr.index)
			return nil
		}
		w, ok := r.(raft.ReadCloserWrapper)
		if !ok {
			break
		}
		r = w.WrappedReadCloser()
	}
	f.logger.Warn("restored a snapshot of unknown index; AppliedIndex and ReadBarrier may lag until the next entry")
	return nil
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

// Package raftfsm adapts the lock manager (package fsm) to
// github.com/hashicorp/raft: it implements raft.FSM and raft.BatchingFSM,
// decodes log entries, hands every applied entry's events to a sink, and
// streams snapshots. It holds no lock logic of its own.
//
// This package is implementation, not API: it makes no compatibility
// promise, and it exports only what other lockcluster packages use. The
// stable API is the client (package lockcluster) and the wire contract
// (api/lockclusterv1).
package raftfsm

import (
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/lockcluster/lockcluster/fsm"
)

// FSM is the raft.BatchingFSM of one replica.
type FSM struct {
	m        *fsm.Machine
	sink     func(index uint64, time int64, ap fsm.Applied)
	restored func(index uint64)
	fatal    func(index uint64, err error)
	logger   hclog.Logger
	// batch is ApplyBatch's work space, reused (raft's FSM goroutine).
	batch struct {
		pos []int
		idx []uint64
		es  []fsm.Entry
		aps []fsm.Applied
	}
}

// Option configures an FSM.
type Option func(*FSM)

// WithSink sets the function called, on raft's FSM goroutine, with every
// applied entry's index, leader time (fsm.Entry.Time) and result, events
// and changes, in log order. It must not block for long: it delays every
// later entry. After a batch (ApplyBatch) it is called once the whole
// batch is applied: the machine may already hold the batch's later
// entries, so a sink that reads the machine's state must not take it for
// the state right after its entry.
func WithSink(f func(index uint64, time int64, ap fsm.Applied)) Option {
	return func(a *FSM) { a.sink = f }
}

// WithRestored sets the function called, on raft's FSM goroutine, after a
// snapshot was restored (at start, or installed from the leader), with the
// machine's applied index from then on: no entry at or below it will be
// applied. The watch history starts over from it (internal/server).
func WithRestored(f func(index uint64)) Option { return func(a *FSM) { a.restored = f } }

// withFatal sets what happens when a committed entry cannot be decoded. The
// default logs the error and panics: a replica that skipped an entry would
// silently diverge from the others, so it must stop.
func withFatal(f func(index uint64, err error)) Option { return func(a *FSM) { a.fatal = f } }

// WithLogger sets the logger.
func WithLogger(l hclog.Logger) Option { return func(a *FSM) { a.logger = l } }

// New adapts m.
func New(m *fsm.Machine, opts ...Option) *FSM {
	a := &FSM{m: m, logger: hclog.NewNullLogger()}
	for _, o := range opts {
		o(a)
	}
	if a.fatal == nil {
		a.fatal = func(index uint64, err error) {
			a.logger.Error("cannot apply a committed raft entry; stopping this node so its state cannot diverge", "index", index, "error", err)
			panic(fmt.Sprintf("lockcluster: raft entry %d cannot be applied: %v", index, err))
		}
	}
	return a
}

// Apply applies one command entry. Its response (an fsm.Applied) reaches the
// proposer as the ApplyFuture's Response.
func (a *FSM) Apply(l *raft.Log) interface{} {
	if l.Type != raft.LogCommand {
		return nil
	}
	e, ok := a.decode(l)
	if !ok {
		return nil
	}
	ap := a.m.Apply(l.Index, e)
	if a.sink != nil {
		a.sink(l.Index, e.Time, ap)
	}
	return ap
}

// decode decodes and checks a command entry; an entry that cannot be
// applied stops the node (fatal) and ok is false.
func (a *FSM) decode(l *raft.Log) (e fsm.Entry, ok bool) {
	e, err := fsm.DecodeEntry(l.Data)
	if err == nil {
		err = a.m.CheckEntry(l.Index, e) // past 2^48, or another group's SetGroup
	}
	if err != nil {
		a.fatal(l.Index, err)
		return fsm.Entry{}, false
	}
	return e, true
}

// ApplyBatch applies committed entries in order (raft.BatchingFSM): the
// command entries under one hold of the machine's lock (Machine.ApplyAll),
// then the sink for each, in order. A batch with an entry that cannot be
// applied stops the node before any of it is.
func (a *FSM) ApplyBatch(logs []*raft.Log) []interface{} {
	out := make([]interface{}, len(logs))
	b := &a.batch
	b.pos, b.idx, b.es, b.aps = b.pos[:0], b.idx[:0], b.es[:0], b.aps[:0]
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		e, ok := a.decode(l)
		if !ok {
			return out
		}
		b.pos, b.idx, b.es = append(b.pos, i), append(b.idx, l.Index), append(b.es, e)
	}
	b.aps = a.m.ApplyAll(b.idx, b.es, b.aps)
	for j, ap := range b.aps {
		if a.sink != nil {
			a.sink(b.idx[j], b.es[j].Time, ap)
		}
		out[b.pos[j]] = ap
	}
	clear(b.es) // let the entries' commands go
	clear(b.aps)
	return out
}

// Snapshot marks the point, on raft's FSM goroutine, in O(namespaces);
// Persist encodes the state at that point while entries go on being
// applied (fsm's copy-on-write), so a large state pauses no entry for more
// than one encoder chunk. While another snapshot is being encoded (a
// backup, a digest) it fails with ErrSnapshotBusy instead of waiting for
// it, which would stop every apply meanwhile; raft logs the failure and
// tries again at its next snapshot interval.
func (a *FSM) Snapshot() (raft.FSMSnapshot, error) {
	s := a.m.TryBeginSnapshot()
	if s == nil {
		return nil, ErrSnapshotBusy
	}
	return &snapshot{s: s}, nil
}

// ErrSnapshotBusy: raft asked for a snapshot while another was being
// encoded. raftnode's Node.Snapshot asks again.
var ErrSnapshotBusy = errors.New("another snapshot of the lock state is being encoded; try again")

// Restore replaces the state with a snapshot's; on error the old state is
// kept and raft reports the error.
func (a *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	if err := a.m.Restore(rc); err != nil {
		return err
	}
	if a.restored != nil {
		a.restored(a.m.LastIndex())
	}
	return nil
}

type snapshot struct{ s *fsm.Snap }

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	b, err := s.s.Encode()
	if err != nil {
		sink.Cancel()
		return err
	}
	if _, err := sink.Write(b); err != nil {
		sink.Cancel()
		return fmt.Errorf("writing snapshot: %w", err)
	}
	return sink.Close()
}

// Release ends a snapshot that was not persisted; after Persist it does
// nothing.
func (s *snapshot) Release() { s.s.Release() }

var _ raft.BatchingFSM = (*FSM)(nil)

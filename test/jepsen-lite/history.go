package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"

	"golang.org/x/sys/unix"
)

// Op is one entry of the history. Client operations come in pairs: an
// invoke, then ok (it happened, with its result), fail (it certainly did
// not happen) or info (its outcome is unknown). Events have no pair: a
// lock lost ("lost"), a write seen by the fenced register ("write"), a
// fault of the nemesis ("nemesis"), a watch's event ("watch"), a change
// the log holds ("log", read from a node's data directory at the end).
type Op struct {
	Time    int64  `json:"time"`    // CLOCK_MONOTONIC nanoseconds: one clock for every process of the host
	Process int    `json:"process"` // the client process; nemesisProcess for faults
	Type    string `json:"type"`    // invoke, ok, fail, info, event
	F       string `json:"f"`       // acquire, release, query, write, lost, nemesis
	// Hold names one lock request of a process ("3/17") and ties its
	// acquire, writes, loss and release together.
	Hold        string   `json:"hold,omitempty"`
	Workload    string   `json:"workload,omitempty"`
	Names       []string `json:"names,omitempty"`
	Mode        string   `json:"mode,omitempty"`
	IfAvailable bool     `json:"ifAvailable,omitempty"`
	Steal       bool     `json:"steal,omitempty"`
	TimeoutMs   int64    `json:"timeoutMs,omitempty"`
	Session     uint64   `json:"session,omitempty"`
	Token       uint64   `json:"token,omitempty"`
	// Result: granted, not-available, aborted, released, accepted,
	// refused; for a nemesis, start or stop.
	Result string `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
	Value  string `json:"value,omitempty"`  // what a fault did, or why a lock was lost
	Client int    `json:"client,omitempty"` // the client process a fault paused
	// Held and Pending are a query's answer.
	Held    []QLock `json:"held,omitempty"`
	Pending []QLock `json:"pending,omitempty"`
	// Rec is a record (records.go): the one a grant carried, a read's
	// answer, a write's value (invoke) and the record as written (ok).
	Rec *RecInfo `json:"rec,omitempty"`
	// Index is a watch event's or a log entry's index (watch.go); To ends
	// a range of indexes.
	Index uint64 `json:"index,omitempty"`
	To    uint64 `json:"to,omitempty"`
	// Changes are a watch event's or a log entry's changes; Resync marks a
	// watch snapshot that followed COMPACTED.
	Changes []WChange `json:"changes,omitempty"`
	Resync  bool      `json:"resync,omitempty"`
	// Records are the records of a watch's snapshot.
	Records []RecInfo `json:"records,omitempty"`
}

// QLock is one entry of a query's answer.
type QLock struct {
	Name    string `json:"name"`
	Mode    string `json:"mode"`
	Session uint64 `json:"session"`
	Request uint64 `json:"request"`
	Token   uint64 `json:"token,omitempty"`
	Label   string `json:"label,omitempty"` // the client's label: jepsen-p<process>
}

const (
	nemesisProcess = -1
	finalProcess   = -2 // the checks at the end of a run
)

// now reads CLOCK_MONOTONIC, which every process of the host shares, so
// that the histories of client processes merge with the harness's own.
func now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// Sink takes history entries.
type Sink interface{ Add(Op) }

// Recorder keeps the history in memory and writes it, one JSON object a
// line, to a file.
type Recorder struct {
	mu      sync.Mutex
	ops     []Op
	w       *bufio.Writer
	f       *os.File
	holding map[int]string // process -> the hold it has now (for the nemesis)
}

// NewRecorder records to path ("" keeps the history in memory only).
func NewRecorder(path string) (*Recorder, error) {
	r := &Recorder{holding: map[int]string{}}
	if path != "" {
		f, err := os.Create(path)
		if err != nil {
			return nil, err
		}
		r.f, r.w = f, bufio.NewWriter(f)
	}
	return r, nil
}

// Add records op, stamping it with the time if it has none.
func (r *Recorder) Add(op Op) {
	if op.Time == 0 {
		op.Time = now()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, op)
	switch {
	case op.F == "acquire" && op.Result == "granted":
		r.holding[op.Process] = op.Hold
	case op.F == "release" || op.F == "lost":
		if r.holding[op.Process] == op.Hold {
			delete(r.holding, op.Process)
		}
	}
	if r.w != nil {
		b, _ := json.Marshal(op)
		r.w.Write(b)
		r.w.WriteByte('\n')
	}
}

// Ops returns the history so far, sorted by time.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	out := append([]Op(nil), r.ops...)
	r.mu.Unlock()
	sortOps(out)
	return out
}

// Holding reports whether process holds a lock now, as far as its
// history has reached the recorder.
func (r *Recorder) Holding(process int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.holding[process] != ""
}

// Close flushes the file.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w == nil {
		return nil
	}
	err := r.w.Flush()
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	r.w = nil
	return err
}

func sortOps(ops []Op) {
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Time < ops[j].Time })
}

// ReadHistory reads a history written by a Recorder, sorted by time.
func ReadHistory(in io.Reader) ([]Op, error) {
	var out []Op
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<16), 1<<24)
	for n := 1; sc.Scan(); n++ {
		var op Op
		if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
			return nil, fmt.Errorf("history line %d: %v", n, err)
		}
		out = append(out, op)
	}
	sortOps(out)
	return out, sc.Err()
}

// lineSink writes each entry as a JSON line (a client process's stdout).
type lineSink struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (s *lineSink) Add(op Op) {
	if op.Time == 0 {
		op.Time = now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.enc.Encode(op)
}

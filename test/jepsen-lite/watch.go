package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/fsm/raftfsm"
	"github.com/lockcluster/lockcluster/raftnode"
)

// Watchers (SPEC §13). A few clients watch the run's namespace from the
// start of the load to the end of the final phase: --watchers of them every
// name, and one the names of the records workload (prefix rec-) when it
// runs. They resume across faults by themselves (lockcluster.Watcher).
// Every event they receive goes into the history (F "watch"): the first
// snapshot (Result "snapshot", its Index and Records), each entry's changes (Result
// "changes", Index, Changes), a Resync snapshot after COMPACTED, an error
// that stopped a watch, and at the end (Result "end") the last index the
// watch had received (Watcher.LastIndex: every change up to it was
// yielded). A marker written at the end (F "watch-marker": a record
// write's index) is what every watch must reach before it is stopped.
//
// After the cluster is stopped, the log's own history is read from the
// nodes' data directories: each node's newest snapshot restored into a
// fresh fsm.Machine keeping changes, and every entry of its log after it
// replayed (raftnode.ReadState, as `lockcluster snapshot save --data-dir`
// reads a stopped node). The node whose log reaches furthest back is used;
// its changes in the namespace go into the history (F "log", Index,
// Changes) with the range it covers (F "log-range"). check_watch.go
// compares.

// WChange is a change as the history keeps it: a watch's
// (lockcluster.Change) and the log's (fsm.Change) in one shape.
type WChange struct {
	Kind       string   `json:"kind"`
	Names      []string `json:"names,omitempty"`
	Mode       string   `json:"mode,omitempty"`
	MaxHolders int      `json:"maxHolders,omitempty"`
	Session    uint64   `json:"session,omitempty"`
	Request    uint64   `json:"request,omitempty"`
	ClientID   string   `json:"clientId,omitempty"`
	Label      string   `json:"label,omitempty"`
	Token      uint64   `json:"token,omitempty"`
	Cause      string   `json:"cause,omitempty"`
	Reason     string   `json:"reason,omitempty"`
	Rec        *RecInfo `json:"rec,omitempty"`
}

func (c WChange) String() string {
	s := fmt.Sprintf("%s %q s%d r%d", c.Kind, c.Names, c.Session, c.Request)
	if c.Token != 0 {
		s += fmt.Sprintf(" token %d", c.Token)
	}
	if c.Cause != "" {
		s += " (" + c.Cause + ")"
	}
	if c.Rec != nil {
		s += fmt.Sprintf(" record %q token %d index %d", c.Rec.Value, c.Rec.Token, c.Rec.Index)
	}
	return s
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return append([]string(nil), s...)
}

func watchChanges(in []lockcluster.Change) []WChange {
	out := make([]WChange, 0, len(in))
	for _, c := range in {
		w := WChange{Kind: c.Kind.String(), Names: nilIfEmpty(c.Names), Mode: c.Mode, MaxHolders: c.MaxHolders, Session: c.SessionID,
			Request: c.RequestID, ClientID: c.ClientID, Label: c.Label, Token: c.Token, Cause: c.Cause, Reason: c.Reason}
		if c.Record != nil {
			w.Rec = &RecInfo{Name: c.Record.Name, Value: string(c.Record.Value), Token: c.Record.Token, Index: c.Record.Index}
		}
		out = append(out, w)
	}
	return out
}

// logChanges converts the changes of one entry in namespace ns, as the
// client converts them from the wire (no mode on a session's end or a
// record change; no cause "none").
func logChanges(in []fsm.Change, ns string) []WChange {
	var out []WChange
	for _, c := range in {
		if c.Namespace != ns {
			continue
		}
		w := WChange{Kind: c.Kind.String(), Names: nilIfEmpty(c.Names), MaxHolders: int(c.MaxHolders), Session: c.Session,
			Request: c.RequestID, ClientID: c.ClientID, Label: c.Label, Token: c.Token, Reason: c.Reason}
		switch c.Kind {
		case fsm.ChangeSessionEnded, fsm.ChangeRecordSet, fsm.ChangeRecordDeleted:
		default:
			w.Mode = c.Mode.String()
		}
		if cs := c.Cause.String(); cs != "none" {
			w.Cause = cs
		}
		if c.Record != nil {
			w.Rec = &RecInfo{Name: c.Record.Name, Value: string(c.Record.Value), Token: c.Record.Token, Index: c.Record.Index}
		}
		out = append(out, w)
	}
	return out
}

// selects reports whether a watch of prefix ("" every name) sees c: as the
// server's selection (internal/server/watch.go), a change without names
// (a session's end) only goes to a watch of every name.
func selects(prefix string, c WChange) bool {
	if prefix == "" {
		return true
	}
	for _, n := range c.Names {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return c.Rec != nil && len(c.Names) == 0 && strings.HasPrefix(c.Rec.Name, prefix)
}

// watchers runs the watches of a run.
type watchers struct {
	rn  *runner
	mu  sync.Mutex
	all []*watchRun
}

type watchRun struct {
	process int
	prefix  string
	c       *lockcluster.Client
	w       *lockcluster.Watcher
	cancel  context.CancelFunc
	done    chan struct{}
}

// startWatchers starts n watches of every name, and one of prefix rec-
// when the records workload runs.
func (rn *runner) startWatchers(ctx context.Context, n int) *watchers {
	ws := &watchers{rn: rn}
	prefixes := make([]string, n)
	if n > 0 && contains(rn.cfg.Workloads, wRecords) {
		prefixes = append(prefixes, "rec-")
	}
	for _, prefix := range prefixes {
		ws.start(ctx, prefix)
	}
	return ws
}

// start starts one watch of prefix ("" every name) on its own client.
func (ws *watchers) start(ctx context.Context, prefix string) {
	rn := ws.rn
	p := rn.newProcess()
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	c, err := lockcluster.Dial(dctx, rotate(rn.c.Endpoints(), p), lockcluster.WithNamespace(rn.ns), lockcluster.WithTTL(rn.cfg.TTL),
		lockcluster.WithLabel(label(p)))
	cancel()
	if err != nil {
		rn.rec.Add(Op{Process: p, Type: "event", F: "watch", Workload: "watch", Result: "error", Value: prefix, Error: "dial: " + err.Error()})
		return
	}
	wctx, wcancel := context.WithCancel(context.Background())
	w, err := c.Watch(wctx, lockcluster.WatchOptions{Prefix: prefix})
	if err != nil {
		wcancel()
		c.Close(context.Background())
		rn.rec.Add(Op{Process: p, Type: "event", F: "watch", Workload: "watch", Result: "error", Value: prefix, Error: err.Error()})
		return
	}
	rn.rec.Add(Op{Process: p, Type: "event", F: "watch", Workload: "watch", Result: "start", Value: prefix})
	r := &watchRun{process: p, prefix: prefix, c: c, w: w, cancel: wcancel, done: make(chan struct{})}
	ws.all = append(ws.all, r)
	go ws.loop(wctx, r)
}

// loop records every event of one watch until it is stopped.
func (ws *watchers) loop(ctx context.Context, r *watchRun) {
	defer close(r.done)
	for {
		ev, err := r.w.Next(ctx)
		if err != nil {
			if ctx.Err() == nil {
				ws.rn.rec.Add(Op{Process: r.process, Type: "event", F: "watch", Workload: "watch", Result: "error", Value: r.prefix, Error: err.Error()})
			}
			return
		}
		op := Op{Process: r.process, Type: "event", F: "watch", Workload: "watch", Index: ev.Index, Value: r.prefix}
		if ev.Snapshot != nil {
			op.Result, op.Resync = "snapshot", ev.Resync
			op.Error = fmt.Sprintf("%d held, %d pending, %d records", len(ev.Snapshot.Held), len(ev.Snapshot.Pending), len(ev.Snapshot.Records))
			op.Held, op.Pending = qlocks(ev.Snapshot.Held), qlocks(ev.Snapshot.Pending)
			for _, rec := range ev.Snapshot.Records {
				op.Records = append(op.Records, *recInfo(rec, true))
			}
		} else {
			op.Result, op.Changes = "changes", watchChanges(ev.Changes)
		}
		ws.rn.rec.Add(op)
	}
}

// stop writes the end marker, waits (bounded) until every watch has
// received it, and stops them.
func (ws *watchers) stop(ctx context.Context, bound time.Duration) {
	if len(ws.all) == 0 {
		return
	}
	// One more watch of every name, started now: its snapshot is taken
	// within the log the nodes keep (the first watches' snapshots are
	// usually older than a long run's newest raft snapshot), so that the
	// checker can compare its locks with the log's state there.
	ws.start(ctx, "")
	marker := ws.rn.watchMarker(ctx)
	deadline := time.Now().Add(bound)
	for _, r := range ws.all {
		for marker > 0 && r.w.LastIndex() < marker && time.Now().Before(deadline) && ctx.Err() == nil {
			sleepCtx(ctx, 100*time.Millisecond)
		}
	}
	for _, r := range ws.all {
		r.cancel()
		<-r.done
		r.w.Close()
		ws.rn.rec.Add(Op{Process: r.process, Type: "event", F: "watch", Workload: "watch", Result: "end", Index: r.w.LastIndex(), Value: r.prefix})
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r.c.Close(cctx)
		cancel()
	}
}

// watchMarker writes a record (watch-end) and returns the index of the
// write (0 when it could not be made): every watch must reach it.
func (rn *runner) watchMarker(ctx context.Context) uint64 {
	fail := func(err error) uint64 {
		rn.rec.Add(Op{Process: finalProcess, Type: "fail", F: "watch-marker", Value: err.Error()})
		return 0
	}
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := lockcluster.Dial(mctx, rn.c.Endpoints(), lockcluster.WithNamespace(rn.ns), lockcluster.WithTTL(rn.cfg.TTL), lockcluster.WithLabel("jepsen-marker"))
	if err != nil {
		return fail(err)
	}
	defer c.Close(context.Background())
	l, err := c.Acquire(mctx, "watch-end", lockcluster.Options{})
	if err != nil {
		return fail(err)
	}
	rec, err := l.SetRecord(mctx, "watch-end", []byte("end"))
	l.Release(mctx)
	if err != nil {
		return fail(err)
	}
	rn.rec.Add(Op{Process: finalProcess, Type: "ok", F: "watch-marker", Index: rec.Index})
	return rec.Index
}

// dataDirs is what a cluster driver whose nodes keep their data on this
// machine offers: node i's data directory.
type dataDirs interface{ DataDir(i int) string }

func (lc *localCluster) DataDir(i int) string { return lc.Nodes[i].Dir }

// nodeLog is the log's history of a namespace as one stopped node holds it.
type nodeLog struct {
	node     int
	from, to uint64 // the entries replayed: from..to (from-1: the snapshot)
	entries  []Op   // F "log": entries with changes in the namespace
	// states: F "log-state": the namespace's locks (Held, Pending) right
	// after each index a watch's snapshot was taken at, within from-1..to.
	states []Op
	err    error
}

// readNodeLog replays node i's data directory (stopped) into a fresh
// machine that keeps changes, and queries the namespace after each index
// of snapshotAt. On a node of several Raft groups (--groups) it replays
// every group's log: the namespace lives in one group at a time and its
// indexes are logical, growing across its moves, so its history is the
// union of its entries in every group, by logical index (groupLogs).
func readNodeLog(dir, ns string, node int, snapshotAt map[uint64]bool) nodeLog {
	if groups := groupCount(dir); groups > 1 {
		return groupLogs(dir, ns, node, groups, snapshotAt)
	}
	return readGroupLog(filepath.Join(dir, "raft"), fsm.New(), ns, node, snapshotAt)
}

// readGroupLog replays one group's log (raftDir) into m; every index it
// reports is m's logical index (the raw one with one group).
func readGroupLog(raftDir string, m *fsm.Machine, ns string, node int, snapshotAt map[uint64]bool) nodeLog {
	m.KeepChanges(true)
	nl := nodeLog{node: node}
	var restored uint64 // the snapshot's logical index, as of the restore
	state := func(raw uint64) {
		index := m.Logical(raw)
		if snapshotAt[index] && m.Owns(ns) == nil {
			q := m.Query(ns)
			nl.states = append(nl.states, Op{Process: finalProcess, Type: "event", F: "log-state", Index: index, Held: logLocks(q.Held), Pending: logLocks(q.Pending)})
		}
	}
	sink := func(raw uint64, _ int64, ap fsm.Applied) {
		if cs := logChanges(ap.Changes, ns); len(cs) > 0 {
			nl.entries = append(nl.entries, Op{Process: finalProcess, Type: "event", F: "log", Index: m.Logical(raw), Changes: cs})
		}
		state(raw)
	}
	// One entry at a time: the sink queries the machine, which after a
	// batch (raftfsm.ApplyBatch) would already hold the batch's later
	// entries.
	one := entryByEntry{raftfsm.New(m, raftfsm.WithSink(sink), raftfsm.WithRestored(func(raw uint64) {
		restored = m.Logical(raw)
		state(raw)
	}))}
	st, err := raftnode.ReadState(raftDir, one, nil)
	if restored == 0 && st.SnapshotIndex > 0 && m.Logical(0) == 0 {
		restored = st.SnapshotIndex // no offset: raw and logical are one
	}
	nl.from, nl.to, nl.err = restored+1, m.Logical(st.Index), err
	return nl
}

// groupCount is the number of groups a node's data directory holds
// (DATA_DIR/groups/count; 1 without it).
func groupCount(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "groups", "count"))
	if err != nil {
		return 1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// groupLogs is readNodeLog for a node of several groups: every group's
// entries of the namespace, merged by logical index. The history covers
// from the latest of the groups' first replayed indexes (a group that
// restored a snapshot holds nothing before it) to the last index any
// group reached.
func groupLogs(dir, ns string, node, groups int, snapshotAt map[uint64]bool) nodeLog {
	out := nodeLog{node: node}
	for g := range groups {
		raftDir, m := filepath.Join(dir, "raft"), fsm.New()
		if g > 0 {
			raftDir, m = filepath.Join(dir, "groups", "g"+strconv.Itoa(g), "raft"), fsm.NewGroup(uint16(g))
		}
		nl := readGroupLog(raftDir, m, ns, node, snapshotAt)
		if nl.err != nil {
			out.err = fmt.Errorf("group %d: %w", g, nl.err)
			return out
		}
		out.from, out.to = max(out.from, nl.from), max(out.to, nl.to)
		out.entries = append(out.entries, nl.entries...)
		out.states = append(out.states, nl.states...)
	}
	sort.SliceStable(out.entries, func(i, j int) bool { return out.entries[i].Index < out.entries[j].Index })
	sort.SliceStable(out.states, func(i, j int) bool { return out.states[i].Index < out.states[j].Index })
	return out
}

// entryByEntry hides an FSM's ApplyBatch: raft (and raftnode.ReadState)
// then apply one entry at a time.
type entryByEntry struct{ raft.FSM }

// logLocks converts a machine's query answer as the client converts it
// from the wire.
func logLocks(in []fsm.LockInfo) []QLock {
	out := make([]QLock, len(in))
	for i, l := range in {
		out[i] = QLock{Name: l.Name, Mode: l.Mode.String(), Session: l.Session, Request: l.RequestID, Token: l.Token, Label: l.Label}
	}
	return out
}

// readLogs reads every node's log (the cluster must be stopped) and
// records the one that reaches furthest back.
func (rn *runner) readLogs() {
	dd, ok := rn.c.(dataDirs)
	if !ok {
		rn.rec.Add(Op{Process: finalProcess, Type: "fail", F: "log-range", Value: "the cluster driver keeps no data directory here: the log's history was not read"})
		return
	}
	snapshotAt := map[uint64]bool{}
	for _, op := range rn.rec.Ops() {
		if op.F == "watch" && op.Result == "snapshot" {
			snapshotAt[op.Index] = true
		}
	}
	var logs []nodeLog
	var parts []string
	for i := range rn.c.Size() {
		nl := readNodeLog(dd.DataDir(i), rn.ns, i, snapshotAt)
		if nl.err != nil {
			parts = append(parts, fmt.Sprintf("node %d: %v", i, nl.err))
			continue
		}
		parts = append(parts, fmt.Sprintf("node %d: snapshot at %d, log %d..%d, %d entries with changes in the namespace", i, nl.from-1, nl.from, nl.to, len(nl.entries)))
		logs = append(logs, nl)
	}
	if len(logs) == 0 {
		rn.rec.Add(Op{Process: finalProcess, Type: "fail", F: "log-range", Value: "no node's log could be read: " + strings.Join(parts, "; ")})
		return
	}
	sort.SliceStable(logs, func(i, j int) bool {
		if logs[i].from != logs[j].from {
			return logs[i].from < logs[j].from
		}
		return logs[i].to > logs[j].to
	})
	best := logs[0]
	rn.rec.Add(Op{Process: finalProcess, Type: "ok", F: "log-range", Index: best.from, To: best.to,
		Value: fmt.Sprintf("node %d's log; %s", best.node, strings.Join(parts, "; "))})
	for _, op := range best.entries {
		rn.rec.Add(op)
	}
	for _, op := range best.states {
		rn.rec.Add(op)
	}
}

package node_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/fsm/raftfsm"
	"github.com/lockcluster/lockcluster/internal/node"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
	"github.com/lockcluster/lockcluster/raftnode"
)

// The acceptance test of watches (issue 26), on a real 3-node cluster: a
// watcher written from the proto alone, with its own resume loop, streams
// the changes a load of locks, record writes and releases makes while the
// node serving it is stopped twice (and restarted); what it received must
// equal, index by index, the changes the log holds, as a fresh machine
// replaying a survivor's raft log computes them, filtered by its
// selection: no gap, no duplicate. A resume below what the nodes keep gets
// COMPACTED.
func TestWatchAcrossNodeRestartsMatchesTheLog(t *testing.T) {
	if testing.Short() {
		t.Skip("a load of some 10,000 changes across two node restarts")
	}
	const (
		ns      = "acc"
		prefix  = "w/"
		history = 5000 // changes each node keeps: the resume below it is COMPACTED
		want    = 10000
	)
	var dirs []string
	c := nodetest.Start(t, 3, nodetest.Options{Quiet: true, Node: func(cfg *node.Config) {
		cfg.Server.WatchHistory = history
		cfg.Server.WatchProgressInterval = 100 * time.Millisecond
		dirs = append(dirs, filepath.Join(cfg.DataDir, "raft"))
	}})
	c.WaitLeader(10 * time.Second)
	addrs := c.Addrs()
	clients := make([]pb.LocksClient, len(addrs))
	for i, a := range addrs {
		clients[i] = pb.NewLocksClient(rawConn(t, a))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The watcher: its own resume loop, from the proto alone.
	w := &protoWatcher{clients: clients, req: &pb.WatchRequest{Namespace: ns, Prefix: prefix}}
	watchDone := make(chan error, 1)
	go func() { watchDone <- w.run(ctx) }()
	c.WaitFor(20*time.Second, "the watcher's snapshot", func() bool { return w.start.Load() > 0 })

	// The load: writers that lock, write the record and release (in one
	// entry or two), through any node, retrying elsewhere on failure; one
	// name in five is outside the watch's selection.
	var maxIndex atomic.Uint64
	seen := func(i uint64) {
		for {
			m := maxIndex.Load()
			if i <= m || maxIndex.CompareAndSwap(m, i) {
				return
			}
		}
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var load sync.WaitGroup
	for wr := range 8 {
		load.Add(1)
		go func() {
			defer load.Done()
			writeLoad(loadCtx, clients, ns, wr, seen)
		}()
	}
	await := func(what string, n int64) {
		t.Helper()
		c.WaitFor(120*time.Second, what, func() bool {
			if err := watchErr(watchDone); err != nil {
				t.Fatalf("the watcher failed: %v", err)
			}
			return w.changes.Load() >= n
		})
	}
	// Kill the node serving the watch twice: stop it, let the watcher
	// move and stream on, restart it.
	for round, at := range []int64{want / 4, want * 5 / 8} {
		await(fmt.Sprintf("%d changes before stop %d", at, round+1), at)
		victim := int(w.serving.Load())
		t.Logf("stopping node %d, which serves the watch (%d changes received)", victim, w.changes.Load())
		c.Stop(victim)
		await(fmt.Sprintf("%d changes after stop %d", at+want/8, round+1), at+want/8)
		if v := int(w.serving.Load()); v == victim {
			t.Fatalf("the watch is still served by stopped node %d", v)
		}
		c.Restart(victim)
	}
	await("the changes the test wants", want+want/20)
	stopLoad()
	load.Wait()
	final := maxIndex.Load()
	c.WaitFor(60*time.Second, "the watcher to reach the last write", func() bool {
		if err := watchErr(watchDone); err != nil {
			t.Fatalf("the watcher failed: %v", err)
		}
		return w.last.Load() >= final
	})
	if w.moves.Load() < 2 {
		t.Fatalf("the watcher moved %d times, want at least 2", w.moves.Load())
	}

	// A resume below what the nodes keep: COMPACTED, naming the oldest.
	for i, lc := range clients {
		st, err := lc.Watch(ctx, &pb.WatchRequest{Namespace: ns, Prefix: prefix, FromIndex: 1, MinIndex: final})
		if err == nil {
			_, err = st.Recv()
		}
		oldest, _ := strconv.ParseUint(errMeta(err)["oldest_index"], 10, 64)
		if status.Code(err) != codes.OutOfRange || errReason(err) != pb.ErrorReason_COMPACTED.String() || oldest <= 1 {
			t.Fatalf("node %d: a resume from index 1: %v (%v); want OutOfRange COMPACTED naming an oldest index above 1", i, err, errMeta(err))
		}
	}
	cancel()
	<-watchDone
	got := w.received()

	// The log's changes: a survivor's raft log replayed through a fresh
	// machine that keeps them.
	survivor := 0
	c.Stop(survivor)
	m := fsm.New()
	m.KeepChanges(true)
	var logged []*pb.WatchChanges
	adapter := raftfsm.New(m, raftfsm.WithSink(func(i uint64, tm int64, ap fsm.Applied) {
		if wc := selected(ns, prefix, i, tm, ap.Changes); wc != nil {
			logged = append(logged, wc)
		}
	}))
	st, err := raftnode.ReadState(dirs[survivor], adapter, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := w.start.Load()
	if st.SnapshotIndex > start {
		t.Fatalf("node %d's log starts after a snapshot at %d, past the watch's start at %d: it cannot be compared", survivor, st.SnapshotIndex, start)
	}
	var expected []*pb.WatchChanges
	for _, wc := range logged {
		if wc.Index > start && wc.Index <= final {
			expected = append(expected, wc)
		}
	}
	var received []*pb.WatchChanges
	for _, wc := range got {
		if wc.Index <= final {
			received = append(received, wc)
		}
	}
	n := 0
	for _, wc := range received {
		n += len(wc.Changes)
	}
	t.Logf("the watch from index %d received %d changes in %d entries up to index %d, moving %d times", start, n, len(received), final, w.moves.Load())
	if n < want {
		t.Fatalf("the watch received %d changes, want at least %d", n, want)
	}
	for i := 0; i < len(received) || i < len(expected); i++ {
		switch {
		case i >= len(received):
			t.Fatalf("the watch missed the changes at index %d (and %d more entries)", expected[i].Index, len(expected)-i-1)
		case i >= len(expected):
			t.Fatalf("the watch received changes at index %d that the log does not have", received[i].Index)
		case received[i].Index != expected[i].Index:
			t.Fatalf("entry %d: the watch received index %d, the log has index %d next (a gap or a duplicate)", i, received[i].Index, expected[i].Index)
		}
		if g, e := changesKey(received[i]), changesKey(expected[i]); g != e {
			t.Fatalf("index %d: the watch received\n%s\nthe log has\n%s", received[i].Index, g, e)
		}
	}
}

// protoWatcher is a watch client built on the proto alone: on a stream
// error it moves to the next node and resumes from the last index it
// received (a change or a progress).
type protoWatcher struct {
	clients []pb.LocksClient
	req     *pb.WatchRequest

	mu      sync.Mutex
	got     []*pb.WatchChanges
	start   atomic.Uint64 // the snapshot's index
	last    atomic.Uint64 // the last index received
	changes atomic.Int64
	serving atomic.Int32 // the node it reads from
	moves   atomic.Int32 // resumes on another node
}

func (w *protoWatcher) received() []*pb.WatchChanges {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*pb.WatchChanges(nil), w.got...)
}

// run watches until ctx ends; it fails on a gap it can see, a COMPACTED,
// or when no node serves it for a long time.
func (w *protoWatcher) run(ctx context.Context) error {
	node := 0
	failing := time.Now()
	for ctx.Err() == nil {
		req := &pb.WatchRequest{Namespace: w.req.Namespace, Prefix: w.req.Prefix, Names: w.req.Names}
		if last := w.last.Load(); last > 0 {
			req.FromIndex, req.MinIndex = last, last
		}
		w.serving.Store(int32(node))
		got, err := w.stream(ctx, node, req)
		if ctx.Err() != nil {
			return nil
		}
		if got {
			failing = time.Now()
		}
		if status.Code(err) == codes.OutOfRange {
			return fmt.Errorf("node %d: %w", node, err)
		}
		if time.Since(failing) > 30*time.Second {
			return fmt.Errorf("no node has served the watch for 30s; last error from node %d: %w", node, err)
		}
		node = (node + 1) % len(w.clients)
		if w.last.Load() > 0 {
			w.moves.Add(1)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// stream reads one stream until it fails; got says whether it received
// anything.
func (w *protoWatcher) stream(ctx context.Context, node int, req *pb.WatchRequest) (got bool, err error) {
	st, err := w.clients[node].Watch(ctx, req)
	if err != nil {
		return false, err
	}
	for {
		m, err := st.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the stream ended")
			}
			return got, err
		}
		got = true
		switch k := m.Kind.(type) {
		case *pb.WatchResponse_Snapshot:
			if req.FromIndex != 0 {
				return got, fmt.Errorf("a snapshot on a resumed watch")
			}
			if !k.Snapshot.More {
				w.start.Store(k.Snapshot.Index)
				w.last.Store(k.Snapshot.Index)
			}
		case *pb.WatchResponse_Changes:
			if last := w.last.Load(); k.Changes.Index <= last {
				return got, fmt.Errorf("node %d sent changes at index %d after index %d: a duplicate", node, k.Changes.Index, last)
			}
			w.mu.Lock()
			w.got = append(w.got, k.Changes)
			w.mu.Unlock()
			w.changes.Add(int64(len(k.Changes.Changes)))
			w.last.Store(k.Changes.Index)
		case *pb.WatchResponse_Progress:
			if k.Progress.Index > w.last.Load() {
				w.last.Store(k.Progress.Index)
			}
		}
	}
}

func watchErr(done chan error) error {
	select {
	case err := <-done:
		if err == nil {
			err = errors.New("the watcher returned")
		}
		done <- err
		return err
	default:
		return nil
	}
}

// writeLoad locks a name of writer wr, writes its record and releases it,
// over and over, through whichever node answers; every fifth name is
// outside the watch's prefix.
func writeLoad(ctx context.Context, clients []pb.LocksClient, ns string, wr int, seen func(uint64)) {
	node := wr % len(clients)
	call := func(f func(ctx context.Context, lc pb.LocksClient) (uint64, error)) bool {
		for ctx.Err() == nil {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			idx, err := f(cctx, clients[node])
			cancel()
			if err == nil {
				seen(idx)
				return true
			}
			node = (node + 1) % len(clients)
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
		return false
	}
	var s *pb.OpenSessionResponse
	if !call(func(ctx context.Context, lc pb.LocksClient) (uint64, error) {
		var err error
		s, err = lc.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: ns, Label: "load", Ttl: durationpb.New(10 * time.Minute)})
		return s.GetIndex(), err
	}) {
		return
	}
	for id := uint64(1); ctx.Err() == nil; id++ {
		name := fmt.Sprintf("w/%d/%d", wr, id%4)
		if id%5 == 0 {
			name = fmt.Sprintf("other/%d", wr)
		}
		var token uint64
		if !call(func(ctx context.Context, lc pb.LocksClient) (uint64, error) {
			r, err := lc.Request(ctx, &pb.LockRequest{Namespace: ns, SessionId: s.SessionId, SessionSecret: s.Secret, RequestId: id,
				Names: []string{name}, Mode: pb.Mode_MODE_EXCLUSIVE, AckBelow: id})
			if err == nil && r.Status != pb.Status_STATUS_GRANTED {
				err = fmt.Errorf("request %d: %v", id, r.Status)
			}
			token = r.GetToken()
			return r.GetIndex(), err
		}) {
			return
		}
		value := fmt.Sprintf("%d by %d", id, wr)
		if id%3 == 0 { // write, then release apart
			if !call(func(ctx context.Context, lc pb.LocksClient) (uint64, error) {
				r, err := lc.SetRecord(ctx, &pb.SetRecordRequest{Namespace: ns, SessionId: s.SessionId, SessionSecret: s.Secret, RequestId: id,
					Token: token, Name: name, Value: []byte(value)})
				return r.GetIndex(), err
			}) {
				return
			}
			if !call(func(ctx context.Context, lc pb.LocksClient) (uint64, error) {
				r, err := lc.Release(ctx, &pb.ReleaseRequest{Namespace: ns, SessionId: s.SessionId, SessionSecret: s.Secret, RequestId: id, Token: token})
				return r.GetIndex(), err
			}) {
				return
			}
			continue
		}
		if !call(func(ctx context.Context, lc pb.LocksClient) (uint64, error) {
			r, err := lc.SetRecord(ctx, &pb.SetRecordRequest{Namespace: ns, SessionId: s.SessionId, SessionSecret: s.Secret, RequestId: id,
				Token: token, Name: name, Value: []byte(value), Release: true})
			return r.GetIndex(), err
		}) {
			return
		}
	}
}

// selected is the WatchChanges of an entry's changes that a watch of the
// names with prefix in ns receives (nil for none), as the wire has them.
func selected(ns, prefix string, index uint64, tm int64, changes []fsm.Change) *pb.WatchChanges {
	var wc *pb.WatchChanges
	for _, c := range changes {
		if c.Namespace != ns {
			continue
		}
		match := false
		for _, n := range c.Names {
			match = match || strings.HasPrefix(n, prefix)
		}
		if !match {
			continue
		}
		if wc == nil {
			wc = &pb.WatchChanges{Index: index, Time: ts(tm)}
		}
		pc := &pb.Change{Kind: pb.Change_Kind(c.Kind), Names: c.Names, SessionId: c.Session, RequestId: c.RequestID, Token: c.Token,
			ClientId: c.ClientID, Label: c.Label, MaxHolders: c.MaxHolders}
		if c.Record != nil {
			pc.Record = &pb.Record{Name: c.Record.Name, Value: c.Record.Value, Token: c.Record.Token, Index: c.Record.Index}
		}
		wc.Changes = append(wc.Changes, pc)
	}
	return wc
}

// changesKey is what the test compares of one entry's changes.
func changesKey(wc *pb.WatchChanges) string {
	var b strings.Builder
	fmt.Fprintf(&b, "index %d time %d:", wc.Index, wc.GetTime().AsTime().UnixNano())
	for _, c := range wc.Changes {
		fmt.Fprintf(&b, "\n  %s %v session %d request %d token %d client %s label %q max %d", c.Kind, c.Names, c.SessionId, c.RequestId, c.Token, c.ClientId, c.Label, c.MaxHolders)
		if r := c.Record; r != nil {
			fmt.Fprintf(&b, " record %s=%q token %d index %d", r.Name, r.Value, r.Token, r.Index)
		}
	}
	return b.String()
}

func ts(unixNano int64) *timestamppb.Timestamp {
	if unixNano == 0 {
		return nil
	}
	return timestamppb.New(time.Unix(0, unixNano))
}

func errMeta(err error) map[string]string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.Metadata
		}
	}
	return nil
}

func errReason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.Reason
		}
	}
	return ""
}

// /metrics counts the node's open watches and what its history holds.
func TestWatchMetrics(t *testing.T) {
	c := nodetest.Start(t, 1, nodetest.Options{Quiet: true})
	c.WaitLeader(10 * time.Second)
	cl := pb.NewLocksClient(rawConn(t, c.Addrs()[0]))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := cl.Watch(ctx, &pb.WatchRequest{Namespace: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil { // the snapshot
		t.Fatal(err)
	}
	c.WaitFor(5*time.Second, "lockcluster_watches 1", func() bool { return scrape(t, c, 0, "lockcluster_watches") == 1 })
	// The status page's live feed reads the history too: it counts.
	feedCtx, stopFeed := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(feedCtx, "GET", "http://"+c.Nodes[0].HTTPAddr()+"/api/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	feed, err := http.DefaultClient.Do(req)
	if err != nil || feed.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/events: %v %v", feed, err)
	}
	c.WaitFor(5*time.Second, "lockcluster_watches 2 with the page's feed", func() bool { return scrape(t, c, 0, "lockcluster_watches") == 2 })
	stopFeed()
	feed.Body.Close()
	c.WaitFor(5*time.Second, "lockcluster_watches 1 once the feed ends", func() bool { return scrape(t, c, 0, "lockcluster_watches") == 1 })
	open, err := cl.OpenSession(context.Background(), &pb.OpenSessionRequest{Namespace: "m", Ttl: durationpb.New(10 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if got := scrape(t, c, 0, "lockcluster_watch_history_changes"); got != 0 {
		t.Fatalf("%v changes held before any", got)
	}
	if _, err := cl.CloseSession(context.Background(), &pb.CloseSessionRequest{Namespace: "m", SessionId: open.SessionId, SessionSecret: open.Secret}); err != nil {
		t.Fatal(err)
	}
	// The session's end is a change: the history holds it, and the
	// watch receives it.
	if got := scrape(t, c, 0, "lockcluster_watch_history_changes"); got != 1 {
		t.Fatalf("%v changes held after a session ended, want 1", got)
	}
	// Nothing was dropped: the oldest index is the entry by which the
	// first watch started the cluster's changes, before the session's.
	if got := scrape(t, c, 0, "lockcluster_watch_history_oldest_index"); got == 0 || uint64(got) >= open.SessionId {
		t.Fatalf("oldest index %v, want the cluster's StartChanges, before the session's %d", got, open.SessionId)
	}
	cancel()
	c.WaitFor(5*time.Second, "lockcluster_watches 0", func() bool { return scrape(t, c, 0, "lockcluster_watches") == 0 })
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/testutil"
)

// Issue 26: records, watch and semaphores from the command line, against
// a real cluster of processes.

// record set/get/delete, and a semaphore with lock --max-holders that
// query shows.
func TestRecordAndSemaphoreCommands(t *testing.T) {
	pc := startProcs(t, 3)
	if out, code := run(t, pc, "record", "get", "cfg"); code != 0 || out != "" {
		t.Fatalf("get of a name without a record: exit %d, %q (want nothing, exit 0)", code, out)
	}
	if out, code := run(t, pc, "record", "get", "cfg", "-o", "json"); code != 0 || !strings.Contains(out, `"found": false`) {
		t.Fatalf("get -o json of a name without a record: exit %d, %s", code, out)
	}
	if out, code := run(t, pc, "record", "set", "cfg", "v1.4.2"); code != 0 {
		t.Fatalf("set: exit %d: %s", code, out)
	}
	if out, code := run(t, pc, "record", "get", "cfg"); code != 0 || out != "v1.4.2\n" {
		t.Fatalf("get after set: exit %d, %q", code, out)
	}
	out, code := run(t, pc, "record", "get", "cfg", "-o", "json")
	var rec struct {
		Found     bool
		Value     string
		Token     uint64
		Index     uint64
		WrittenAt time.Time
	}
	if err := json.Unmarshal([]byte(out), &rec); err != nil || code != 0 || !rec.Found || rec.Value != "v1.4.2" || rec.Token == 0 || rec.Index < rec.Token || rec.WrittenAt.IsZero() {
		t.Fatalf("get -o json: exit %d, %s (%v)", code, out, err)
	}
	// The set released the lock in the same entry: nobody holds cfg.
	c := dialT(t, pc.addrs())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	q, err := c.Query(ctx)
	if err != nil || len(q.Held) != 0 {
		t.Fatalf("after record set: %+v, %v", q, err)
	}
	// A grant carries what the last holder left.
	l, err := c.Acquire(ctx, "cfg", lockcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := l.Record("cfg"); !ok || string(r.Value) != "v1.4.2" || r.Token != rec.Token {
		t.Fatalf("the grant's record: %+v %v", r, ok)
	}
	l.Release(ctx)
	if out, code := run(t, pc, "record", "delete", "cfg"); code != 0 {
		t.Fatalf("delete: exit %d: %s", code, out)
	}
	if out, code := run(t, pc, "record", "get", "cfg"); code != 0 || out != "" {
		t.Fatalf("get after delete: exit %d, %q", code, out)
	}
	if out, code := run(t, pc, "record", "set", "cfg"); code != exitUsage {
		t.Fatalf("set without a value: exit %d: %s", code, out)
	}

	// Two holders of a semaphore of 2; a third queues.
	for i := range 2 {
		cmd, _, _ := lockCmd(pc, "sem", "--mode", "shared", "--max-holders", "2", "--", "sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		testutil.Eventually(t, 15*time.Second, fmt.Sprintf("holder %d", i+1), func() bool {
			q, err := c.Query(ctx)
			return err == nil && len(heldNamed(q, "sem")) == i+1
		})
	}
	third, _, _ := lockCmd(pc, "sem", "--mode", "shared", "--max-holders", "2", "--", "true")
	if err := third.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { third.Process.Kill(); third.Wait() })
	testutil.Eventually(t, 15*time.Second, "the third to queue", func() bool {
		q, err := c.Query(ctx)
		return err == nil && len(q.Pending) == 1 && q.Pending[0].MaxHolders == 2
	})
	out, code = run(t, pc, "query", "-o", "json")
	if code != 0 || strings.Count(out, `"maxHolders": 2`) != 3 {
		t.Fatalf("query -o json shows N on every line: exit %d\n%s", code, out)
	}
	if out, code := run(t, pc, "query"); code != 0 || strings.Count(out, "shared(max=2)") != 3 {
		t.Fatalf("query shows N: exit %d\n%s", code, out)
	}
	if out, code := run(t, pc, "lock", "sem", "--mode", "shared", "--max-holders", "3", "--if-available", "--", "true"); code != exitUsage || !strings.Contains(out, "2") {
		t.Fatalf("another N: exit %d: %s", code, out)
	}
	if out, code := run(t, pc, "lock", "x", "--max-holders", "3", "--", "true"); code != exitUsage || !strings.Contains(out, "--mode shared") {
		t.Fatalf("--max-holders without shared: exit %d: %s", code, out)
	}
}

func heldNamed(q lockcluster.Snapshot, name string) []lockcluster.LockInfo {
	var out []lockcluster.LockInfo
	for _, h := range q.Held {
		if h.Name == name {
			out = append(out, h)
		}
	}
	return out
}

// observe prints every leadership, however short: 100 leaders, each
// holding for about a millisecond (the time its release takes), back to
// back, each granted in the entry that releases the one before; two
// observers print all 100, in order.
func TestObserveEveryLeadership(t *testing.T) {
	pc := startProcs(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	addrs := pc.addrs()
	reversed := slices.Clone(addrs)
	slices.Reverse(reversed)
	var outs []*testutil.Buffer
	for _, a := range [][]string{addrs, reversed} {
		cmd, out, errb := lockCmdAt(pc.bin, a)
		cmd.Args = []string{pc.bin, "observe", "lead"}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
			if t.Failed() {
				t.Logf("observer stderr: %s", errb)
			}
		})
		outs = append(outs, out)
	}
	// A first leader, held until both observers print it: they watch.
	first := dialT(t, addrs, lockcluster.WithLabel("leader-start"))
	held, err := first.Acquire(ctx, "lead", lockcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range outs {
		testutil.Eventually(t, 15*time.Second, "the observers to print the first leader", func() bool { return out.String() == "leader-start\n" })
	}
	// 100 candidates queue in order behind it; each resigns as soon as
	// it is elected.
	const n = 100
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		c := dialT(t, addrs, lockcluster.WithLabel(fmt.Sprintf("leader-%03d", i)))
		queued := make(chan struct{})
		var once sync.Once
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Acquire(ctx, "lead", lockcluster.Options{OnQueued: func() { once.Do(func() { close(queued) }) }})
			if err != nil {
				errs <- err
				once.Do(func() { close(queued) })
				return
			}
			if err := l.Release(ctx); err != nil {
				errs <- err
			}
		}()
		select {
		case <-queued:
		case <-ctx.Done():
			t.Fatal("a candidate did not queue")
		}
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := "leader-start\n"
	for i := range n {
		want += fmt.Sprintf("leader-%03d\n", i)
	}
	for i, out := range outs {
		testutil.Eventually(t, 30*time.Second, fmt.Sprintf("observer %d to print the 100th leader", i), func() bool { return strings.Contains(out.String(), "leader-099\n") })
		if got := out.String(); got != want {
			t.Fatalf("observer %d printed:\n%s\nwant leader-start, then leader-000 to leader-099 in order", i, got)
		}
	}
}

// A watch whose node is killed resumes on another from the last index it
// received: the changes it yields are exactly those a watch on another
// node yields, no gap, no duplicate.
func TestWatchResumesAcrossNodeKill(t *testing.T) {
	pc := startProcs(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var mu sync.Mutex
	var target string
	tap := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err == nil && strings.HasSuffix(method, "/Watch") {
			mu.Lock()
			target = cc.Target()
			mu.Unlock()
		}
		return cs, err
	}
	a := dialT(t, pc.addrs(), lockcluster.WithDialOptions(grpc.WithChainStreamInterceptor(tap)))
	w1, err := a.Watch(ctx, lockcluster.WatchOptions{Prefix: "w/"})
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()
	s1, err := w1.Next(ctx)
	if err != nil || s1.Snapshot == nil {
		t.Fatalf("first event: %+v, %v", s1, err)
	}
	mu.Lock()
	victim := slices.Index(pc.addrs(), target)
	mu.Unlock()
	if victim < 0 {
		t.Fatalf("the watch's endpoint %q is none of %v", target, pc.addrs())
	}
	var others []string
	for i, addr := range pc.addrs() {
		if i != victim {
			others = append(others, addr)
		}
	}
	b := dialT(t, others)
	w2, err := b.Watch(ctx, lockcluster.WatchOptions{Prefix: "w/"})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	s2, err := w2.Next(ctx)
	if err != nil || s2.Snapshot == nil {
		t.Fatalf("first event of the second watch: %+v, %v", s2, err)
	}
	collect := func(w *lockcluster.Watcher, into *[]lockcluster.WatchEvent, done chan<- error) {
		for {
			ev, err := w.Next(ctx)
			if err != nil {
				done <- err
				return
			}
			mu.Lock()
			*into = append(*into, ev)
			mu.Unlock()
			for _, ch := range ev.Changes {
				if ch.Kind == lockcluster.ChangeRecordSet && ch.Record.Name == "w/end" {
					done <- nil
					return
				}
			}
		}
	}
	var evs1, evs2 []lockcluster.WatchEvent
	done1, done2 := make(chan error, 1), make(chan error, 1)
	go collect(w1, &evs1, done1)
	go collect(w2, &evs2, done2)

	writer := dialT(t, pc.addrs())
	write := func(name, value string) {
		l, err := writer.Acquire(ctx, name, lockcluster.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.SetRecord(ctx, name, []byte(value)); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var killedAt uint64
	for i := range 60 {
		write(fmt.Sprintf("w/%d", i%3), fmt.Sprint(i))
		if i == 20 {
			killedAt = w1.LastIndex()
			pc.kill(victim)
		}
	}
	l, err := writer.Acquire(ctx, "w/end", lockcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.ReleaseWithRecord(ctx, "w/end", []byte("end")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []chan error{done1, done2} {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
	from := max(s1.Index, s2.Index)
	after := func(evs []lockcluster.WatchEvent) []string {
		var out []string
		last := uint64(0)
		for _, ev := range evs {
			if ev.Snapshot != nil || ev.Resync {
				t.Fatalf("a snapshot in the middle of the watch: %+v", ev)
			}
			if ev.Index <= last {
				t.Fatalf("index %d after %d: a duplicate or a step back", ev.Index, last)
			}
			last = ev.Index
			if ev.Index <= from {
				continue
			}
			b, _ := json.Marshal(ev)
			out = append(out, string(b))
		}
		return out
	}
	got, want := after(evs1), after(evs2)
	if len(want) < 180 {
		t.Fatalf("the second watch saw %d entries, want at least 180 (60 grants, writes and releases)", len(want))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the resumed watch's changes differ from another node's watch's:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if w1.LastIndex() <= killedAt {
		t.Fatalf("the watch did not move on after its node was killed at index %d", killedAt)
	}
}

// lock --once-per: three loops stand in for three machines' cron, each
// trying every second to run the job at most once per 3s period, one
// of them with its clock 3 hours ahead (the test hook). The leader is
// killed midway. Over 11 periods, every run is recorded, and the runs are
// at least a period apart and never more than a period and a few seconds
// apart (leader time, from the records): exactly one run per period.
func TestLockOncePerAcrossMachines(t *testing.T) {
	pc := startProcs(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	const period = 3 * time.Second
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")

	c := dialT(t, pc.addrs())
	w, err := c.Watch(ctx, lockcluster.WatchOptions{Names: []string{"nightly"}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	type done struct {
		token  uint64
		doneAt time.Time
	}
	var mu sync.Mutex
	var dones []done
	go func() {
		for {
			ev, err := w.Next(ctx)
			if err != nil {
				return
			}
			for _, ch := range ev.Changes {
				if ch.Kind != lockcluster.ChangeRecordSet {
					continue
				}
				var v struct {
					DoneAt *time.Time `json:"done_at"`
					Token  uint64     `json:"token"`
				}
				if json.Unmarshal(ch.Record.Value, &v) == nil && v.DoneAt != nil {
					mu.Lock()
					dones = append(dones, done{v.Token, *v.DoneAt})
					mu.Unlock()
				}
			}
		}
	}()
	recorded := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(dones)
	}

	loopCtx, stopLoops := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var exits [3]map[int]int
	for k := range 3 {
		exits[k] = map[int]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The machines' cron fire a third of a second apart.
			start := time.NewTimer(time.Duration(k) * time.Second / 3)
			select {
			case <-start.C:
			case <-loopCtx.Done():
				return
			}
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				cmd := exec.CommandContext(ctx, pc.bin, "lock", "nightly", "--if-available", "--once-per", period.String(), "--ttl", "3s",
					"--", "sh", "-c", `echo "$LOCKCLUSTER_LOCK_TOKEN" >> "$RUNS"`)
				cmd.Env = append(os.Environ(), "LOCKCLUSTER_ADDR="+strings.Join(pc.addrs(), ","), "RUNS="+runs)
				if k == 2 {
					cmd.Env = append(cmd.Env, clockOffsetEnv+"=3h")
				}
				out, err := cmd.CombinedOutput()
				code := exitCode(err)
				mu.Lock()
				exits[k][code]++
				mu.Unlock()
				if code != 0 && code != exitNotAvail {
					t.Logf("machine %d: exit %d: %s", k, code, out)
				}
				select {
				case <-tick.C:
				case <-loopCtx.Done():
					return
				}
			}
		}()
	}
	testutil.Eventually(t, 60*time.Second, "5 recorded runs", func() bool { return recorded() >= 5 })
	leader := pc.leader(5 * time.Second)
	pc.kill(leader)
	testutil.Eventually(t, 90*time.Second, "11 recorded runs", func() bool { return recorded() >= 11 })
	stopLoops()
	wg.Wait()

	b, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	ran := strings.Fields(string(b))
	testutil.Eventually(t, 15*time.Second, "every run's record", func() bool { return recorded() >= len(ran) })
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != len(dones) {
		t.Fatalf("%d runs (tokens %v), %d recorded: %+v", len(ran), ran, len(dones), dones)
	}
	for i, d := range dones {
		if fmt.Sprint(d.token) != ran[i] {
			t.Fatalf("run %d: token %s ran, %d recorded", i, ran[i], d.token)
		}
		if i == 0 {
			continue
		}
		gap := d.doneAt.Sub(dones[i-1].doneAt)
		if gap < period {
			t.Fatalf("runs %d and %d were done %s apart, less than the period %s: %+v", i-1, i, gap, period, dones)
		}
		if gap > period+8*time.Second {
			t.Fatalf("runs %d and %d were done %s apart: a period without a run: %+v", i-1, i, gap, dones)
		}
	}
	if n := exits[2][0] + exits[2][exitNotAvail]; n < 5 {
		t.Fatalf("the machine with the offset clock took part %d times: %v", n, exits[2])
	}
	t.Logf("runs: %d; exits by machine: %v", len(ran), exits)
}

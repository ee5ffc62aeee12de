package main

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeCluster is a Cluster of three nodes that exist only as states: the
// nemesis's signals change them, and a paused leader is replaced by a new
// leader of a newer term after electAfter polls (never when electAfter is
// negative).
type fakeCluster struct {
	Cluster // the methods a nemesis does not call

	mu         sync.Mutex
	calls      []string
	leader     int
	term       uint64
	down       map[int]bool
	paused     map[int]bool
	applied    uint64
	polls      int // polls since the leader was paused
	electAfter int
	elected    bool // a new leader has been reported
	pinned     []string
}

func newFakeCluster(electAfter int) *fakeCluster {
	return &fakeCluster{leader: 0, term: 3, down: map[int]bool{}, paused: map[int]bool{}, applied: 100, electAfter: electAfter}
}

func (fc *fakeCluster) Size() int { return 3 }

func (fc *fakeCluster) call(format string, args ...any) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.calls = append(fc.calls, fmt.Sprintf(format, args...))
}

func (fc *fakeCluster) Kill(i int) error {
	fc.call("kill %d", i)
	fc.mu.Lock()
	fc.down[i] = true
	fc.mu.Unlock()
	return nil
}

func (fc *fakeCluster) Restart(i int) error {
	fc.call("restart %d", i)
	fc.mu.Lock()
	fc.down[i] = false
	fc.mu.Unlock()
	return nil
}

func (fc *fakeCluster) Pause(i int) error {
	fc.call("pause %d", i)
	fc.mu.Lock()
	fc.paused[i] = true
	fc.mu.Unlock()
	return nil
}

func (fc *fakeCluster) Resume(i int) error {
	fc.mu.Lock()
	elected := fc.elected
	fc.paused[i] = false
	fc.mu.Unlock()
	fc.call("resume %d (new leader seen: %v)", i, elected)
	return nil
}

func (fc *fakeCluster) states(ctx context.Context, idx []int) []nodeState {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.applied++
	if fc.paused[fc.leader] {
		if fc.polls++; fc.electAfter >= 0 && fc.polls > fc.electAfter {
			fc.leader, fc.term, fc.elected = (fc.leader+1)%3, fc.term+1, true
			for fc.down[fc.leader] || fc.paused[fc.leader] {
				fc.leader = (fc.leader + 1) % 3
			}
		}
	}
	out := make([]nodeState, len(idx))
	for k, i := range idx {
		if fc.down[i] || fc.paused[i] {
			continue
		}
		out[k] = nodeState{ok: true, leader: i == fc.leader, term: fc.term, applied: fc.applied, commit: fc.applied}
	}
	return out
}

func (fc *fakeCluster) pin(i int, seed int64) func() {
	fc.call("pin %d", i)
	return func() { fc.call("unpin %d", i) }
}

func staleNemesis(fc *fakeCluster, seed int64) (*nemesis, *Recorder) {
	rec, _ := NewRecorder("")
	nm := &nemesis{c: fc, kinds: []string{nStaleLeader}, rng: rand.New(rand.NewSource(seed)), sink: rec, states: fc.states,
		pollEvery: time.Millisecond, bound: time.Second, pin: fc.pin, counts: map[string]int{}, skipped: map[string]int{}, shorten: 100}
	return nm, rec
}

// The stale-leader nemesis restarts a follower, pauses the leader after
// the restart, keeps clients pinned to it throughout, and resumes it only
// once another node leads in a newer term.
func TestStaleLeaderNemesis(t *testing.T) {
	variants := map[bool]bool{} // paused once the follower caught up: seen
	for seed := int64(0); len(variants) < 2; seed++ {
		if seed == 20 {
			t.Fatalf("20 seeds did not make both variants (paused at once, paused once caught up): %v", variants)
		}
		fc := newFakeCluster(5)
		nm, rec := staleNemesis(fc, seed)
		if err := nm.inject(context.Background(), nStaleLeader); err != nil {
			t.Fatal(err)
		}
		if len(fc.calls) != 6 {
			t.Fatalf("seed %d: calls %q, want pin, kill, restart, pause, resume, unpin", seed, fc.calls)
		}
		f := strings.TrimPrefix(fc.calls[1], "kill ")
		want := []string{"pin 0", "kill " + f, "restart " + f, "pause 0", "resume 0 (new leader seen: true)", "unpin 0"}
		if f == "0" || strings.Join(fc.calls, "|") != strings.Join(want, "|") {
			t.Errorf("seed %d: calls %q, want %q with a follower killed", seed, fc.calls, want)
		}
		if nm.counts[nStaleLeader] != 1 {
			t.Errorf("seed %d: counts %v", seed, nm.counts)
		}
		var events []string
		for _, op := range rec.Ops() {
			if op.F == "nemesis" && op.Workload == nStaleLeader {
				events = append(events, op.Result+": "+op.Value)
			}
		}
		if len(events) != 3 || !strings.HasPrefix(events[0], "start: node"+f+" (follower) killed") ||
			!strings.HasPrefix(events[1], "pause: node0 (leader, term 3) paused") ||
			!strings.Contains(events[2], "leads in term 4") {
			t.Errorf("seed %d: history %q", seed, events)
		}
		if len(events) == 3 {
			variants[strings.Contains(events[1], "once it had applied index")] = true
		}
	}
}

// When no new leader comes, the leader is resumed anyway once the bound
// has passed, and the history says so.
func TestStaleLeaderNemesisNoElection(t *testing.T) {
	fc := newFakeCluster(-1)
	nm, rec := staleNemesis(fc, 1)
	nm.bound = 50 * time.Millisecond
	// The deadline only stops a nemesis that hangs: it must resume the
	// leader by itself, after its bound, well before it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := nm.inject(ctx, nStaleLeader); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the nemesis waited for a new leader until the test's deadline instead of its bound")
	}
	if got := strings.Join(fc.calls, "|"); !strings.Contains(got, "pause 0|resume 0 (new leader seen: false)") {
		t.Errorf("calls %q", fc.calls)
	}
	ops := rec.Ops()
	if last := ops[len(ops)-1]; !strings.Contains(last.Value, "no other node led in a term above 3") {
		t.Errorf("last event %+v", last)
	}
}

// A restarted follower that never answers: the leader is not paused (it
// would leave no majority).
func TestStaleLeaderNemesisFollowerNeverBack(t *testing.T) {
	fc := newFakeCluster(0)
	nm, _ := staleNemesis(fc, 1)
	nm.bound = 50 * time.Millisecond
	nm.c = &neverRestarts{fc}
	if err := nm.inject(context.Background(), nStaleLeader); err != nil {
		t.Fatal(err)
	}
	for _, c := range fc.calls {
		if strings.HasPrefix(c, "pause") {
			t.Errorf("paused although the follower never came back: %q", fc.calls)
		}
	}
}

// A leader that loses its leadership while the follower restarts is not
// paused: the shape is gone.
func TestStaleLeaderNemesisLeaderDeposed(t *testing.T) {
	fc := newFakeCluster(0)
	nm, rec := staleNemesis(fc, 1)
	nm.c = &deposesOnRestart{fc}
	if err := nm.inject(context.Background(), nStaleLeader); err != nil {
		t.Fatal(err)
	}
	for _, c := range fc.calls {
		if strings.HasPrefix(c, "pause") {
			t.Errorf("paused a deposed leader: %q", fc.calls)
		}
	}
	ops := rec.Ops()
	if last := ops[len(ops)-1]; !strings.Contains(last.Value, "node0 no longer led term 3") {
		t.Errorf("last event %+v", last)
	}
}

type deposesOnRestart struct{ *fakeCluster }

func (d *deposesOnRestart) Restart(i int) error {
	d.fakeCluster.Restart(i)
	d.mu.Lock()
	d.leader, d.term = i, d.term+1
	d.mu.Unlock()
	return nil
}

type neverRestarts struct{ *fakeCluster }

func (n *neverRestarts) Restart(i int) error { n.call("restart %d (stays down)", i); return nil }

func TestStaleLeaderIsInEveryNemesis(t *testing.T) {
	ns, err := parseNemeses("all")
	if err != nil {
		t.Fatal(err)
	}
	if !contains(ns, nStaleLeader) {
		t.Errorf("all = %v, without %s", ns, nStaleLeader)
	}
	if ns, err := parseNemeses("stale-leader"); err != nil || len(ns) != 1 {
		t.Errorf("parseNemeses(stale-leader) = %v, %v", ns, err)
	}
}

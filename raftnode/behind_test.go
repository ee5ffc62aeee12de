package raftnode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

func TestLagTracker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var l lagTracker
	applied := uint64(0)
	reached := func(i uint64) bool { return i <= applied }

	l.observe(at(0), 10)
	l.observe(at(1), 10) // not higher: no note
	l.observe(at(2), 20)
	l.applied(reached)
	if got := l.lag(at(3)); got != 3*time.Second {
		t.Fatalf("lag with nothing applied: %v, want 3s (since index 10 was announced)", got)
	}
	applied = 15
	l.applied(reached)
	if got := l.lag(at(3)); got != time.Second {
		t.Fatalf("lag with 10 applied: %v, want 1s (since index 20)", got)
	}
	applied = 20
	l.applied(reached)
	if got := l.lag(at(3)); got != 0 {
		t.Fatalf("lag with all applied: %v", got)
	}
	l.observe(at(4), 20) // announced again: already applied
	l.applied(reached)
	if got := l.lag(at(5)); got != 0 {
		t.Fatalf("lag after a repeated announcement: %v", got)
	}

	// Full: the last note takes newer indexes and keeps its time.
	var f lagTracker
	for i := range behindSamples + 10 {
		f.observe(at(float64(i)), uint64(i+1))
	}
	if len(f.notes) != behindSamples {
		t.Fatalf("%d notes, want at most %d", len(f.notes), behindSamples)
	}
	applied = behindSamples - 1
	f.applied(reached)
	if len(f.notes) != 1 || f.notes[0].index != behindSamples+10 || f.lag(at(behindSamples+10)) != 11*time.Second {
		t.Fatalf("after the notes filled: %+v", f.notes)
	}
}

// A follower whose FSM does not apply (here: blocked) is fenced as behind
// once the commit index announced behindBound ago is still not applied,
// with an error that names both indexes; the others stay fit; once it
// applies again the fence comes down.
func TestStuckFollowerIsBehind(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	leader := c.waitLeader()
	propose(t, leader.node, "a")
	f := c.followers(leader)[0]
	c.waitEntries([]string{"a"}, f)

	f.fsm.mu.Lock() // its Apply blocks
	var unblock sync.Once
	release := func() { unblock.Do(f.fsm.mu.Unlock) }
	defer release()
	start := time.Now()
	propose(t, leader.node, "b", "c")
	testutil.Eventually(t, behindBound+5*time.Second, f.id+" fenced as behind", func() bool { return errors.Is(f.node.Unfit(), ErrBehind) })
	took := time.Since(start)
	if took < behindBound-behindTick {
		t.Errorf("fenced after %v, before the bound (%v)", took, behindBound)
	}
	err := f.node.Unfit()
	t.Logf("fenced after %v: %v", took, err)
	var be *behindError
	if !errors.As(err, &be) || be.Announced <= be.Applied || !strings.Contains(err.Error(), fmt.Sprint(be.Announced)) || !strings.Contains(err.Error(), fmt.Sprint(be.Applied)) {
		t.Errorf("error %v: want both indexes", err)
	}
	if lag := f.node.ApplyLag(); lag < behindBound {
		t.Errorf("ApplyLag %v while fenced", lag)
	}
	if !f.node.FenceReasons()["behind"] {
		t.Errorf("FenceReasons %v", f.node.FenceReasons())
	}
	for _, tn := range c.nodes {
		if tn != f && tn.node.Unfit() != nil {
			t.Errorf("%s unfit: %v", tn.id, tn.node.Unfit())
		}
	}

	release()
	c.waitEntries([]string{"a", "b", "c"}, f)
	testutil.Eventually(t, 3*time.Second, f.id+" fit again", func() bool { return f.node.Unfit() == nil })
	if lag := f.node.ApplyLag(); lag >= behindClear {
		t.Errorf("ApplyLag %v once caught up", lag)
	}
}

// Followers under a heavy load, and a follower that restarts and catches
// up with thousands of entries, are never fenced as behind.
func TestBusyFollowersAreNotBehind(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.waitLeader()

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var mu sync.Mutex
	maxLag := map[string]time.Duration{}
	var fenced []string
	watch := func(tn *testNode) {
		if tn.node == nil {
			return
		}
		lag := tn.node.ApplyLag()
		mu.Lock()
		defer mu.Unlock()
		maxLag[tn.id] = max(maxLag[tn.id], lag)
		if err := tn.node.fences.get(fenceBehind); err != nil {
			fenced = append(fenced, tn.id+": "+err.Error())
		}
	}
	var wg sync.WaitGroup
	var nodesMu sync.Mutex // c.start and c.stop replace tn.node
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			nodesMu.Lock()
			for _, tn := range c.nodes {
				watch(tn)
			}
			nodesMu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	load := func(d time.Duration) int {
		var n sync.WaitGroup
		var mu sync.Mutex
		count := 0
		end := time.Now().Add(d)
		for w := range 8 {
			n.Add(1)
			go func() {
				defer n.Done()
				for i := 0; time.Now().Before(end); i++ {
					if _, err := leader.node.Propose(ctxTimeout(t, 5*time.Second), []byte(fmt.Sprint(w, "-", i))); err == nil {
						mu.Lock()
						count++
						mu.Unlock()
					}
				}
			}()
		}
		n.Wait()
		return count
	}
	t.Logf("%d proposals under load", load(4*time.Second))

	f := c.followers(leader)[0]
	nodesMu.Lock()
	c.stop(f, true)
	nodesMu.Unlock()
	t.Logf("%d proposals while %s is down", load(2*time.Second), f.id)
	nodesMu.Lock()
	c.start(f, nil)
	nodesMu.Unlock()
	want := leader.node.raft.CommitIndex()
	testutil.Eventually(t, 10*time.Second, f.id+" caught up", func() bool { return f.node.fsmReached(want) })
	testutil.Eventually(t, 2*time.Second, "a tick after", func() bool { return f.node.ApplyLag() < behindClear })
	stop()
	wg.Wait()
	t.Logf("largest apply lags: %v", maxLag)
	if len(fenced) > 0 {
		t.Fatalf("fenced as behind: %q", fenced)
	}
}

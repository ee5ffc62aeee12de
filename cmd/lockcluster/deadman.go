package main

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The dead-man's switch of 'lockcluster lock' (and elect): the job must be
// dead before anyone else can be granted the lock, whatever state
// lockcluster itself is in.
//
// The client's jeopardy deadline J (lockcluster.Client.JeopardyDeadline)
// is the instant the client gives its locks up unless a later heartbeat is
// acknowledged first; the cluster cannot expire the session before
// J + TTL/10 (session/DESIGN.md, "The timeline"). The job gets SIGTERM at
// J − stopGrace and SIGKILL at J, from two places that act on the same
// deadline:
//
//   - lockcluster's own control loop (lock.go, runChild), which learns each
//     new J from the client (WithDeadlineFunc);
//   - the guard process (group.go, the hidden __reap), to which that loop
//     hands every new J through a pipe. The guard is a separate process in
//     a process group of its own: a SIGSTOP of lockcluster, a starved or
//     deadlocked lockcluster, leaves it running, and when lockcluster hands
//     it no later deadline in time it kills the job on its own.
//
// Deadlines cross processes as CLOCK_MONOTONIC nanoseconds, the one
// monotonic clock every process of the machine reads alike, converted by
// the sender (monoAt): a delay in the pipe or in the guard's reading cannot
// move the instant later.

// monoNow reads CLOCK_MONOTONIC, in nanoseconds.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano()
}

// monoAt converts t, which carries this process's monotonic reading, to
// CLOCK_MONOTONIC nanoseconds. The clock is read before t is measured from
// now: time that passes in between (a preemption) makes the result
// earlier, never later.
func monoAt(t time.Time) int64 {
	now := monoNow()
	return now + int64(time.Until(t))
}

// untilMono is how long until the CLOCK_MONOTONIC instant m.
func untilMono(m int64) time.Duration { return time.Duration(m - monoNow()) }

// stopGrace is how long before the jeopardy deadline the job gets SIGTERM,
// and how long after a lost lock it gets SIGKILL: --grace, but at most a
// quarter of the TTL. By J − TTL/4 no heartbeat has been acknowledged for
// three quarters of a TTL (they go every TTL/3, and the client has moved
// to another endpoint at least once): the session is all but lost, and the
// job must be dead at J. A longer --grace still applies in full to what a
// command leaves behind when it exits while the lock is held.
func stopGrace(grace, ttl time.Duration) time.Duration {
	return max(0, min(grace, ttl/4))
}

// deadlineFeed carries the client's jeopardy deadline from the client's
// goroutines (WithDeadlineFunc, which must not block) to the control loop.
type deadlineFeed struct {
	mu    sync.Mutex
	at    time.Time
	moved chan struct{} // a token after each move
}

func newDeadlineFeed() *deadlineFeed { return &deadlineFeed{moved: make(chan struct{}, 1)} }

func (f *deadlineFeed) set(d time.Time) {
	f.mu.Lock()
	f.at = d
	f.mu.Unlock()
	select {
	case f.moved <- struct{}{}:
	default:
	}
}

func (f *deadlineFeed) get() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at
}

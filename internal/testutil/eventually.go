package testutil

import "time"

// Failer is what Eventually needs of a test: testing.TB has it, and so does
// a stand-in for TestMain (nodetest.Main).
type Failer interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Poll intervals: short at first, so that a condition about to hold is
// seen at once; longer later, so that a slow one does not busy the CPUs.
const (
	firstPoll = time.Millisecond
	lastPoll  = 10 * time.Millisecond
)

// Eventually polls cond until it holds, failing t with what it was waiting
// for once timeout passes. The timeout only stops a test that would hang:
// make it generous, never a claim about speed. Call it from the test's
// goroutine (it calls t.Fatalf).
func Eventually(t Failer, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for every := firstPoll; !cond(); every = min(2*every, lastPoll) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(every) // poll interval, not synchronisation
	}
}

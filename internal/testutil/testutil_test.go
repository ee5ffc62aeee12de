package testutil

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// fakeT stands for a test: it records what is logged, its cleanups, and
// how it failed; Fatalf ends the goroutine, as testing's does.
type fakeT struct {
	logs     []string
	cleanups []func()
	failed   string
}

func (f *fakeT) Helper()                   {}
func (f *fakeT) Log(args ...any)           { f.logs = append(f.logs, fmt.Sprint(args...)) }
func (f *fakeT) Cleanup(fn func())         { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) Fatalf(s string, a ...any) { f.failed = fmt.Sprintf(s, a...); runtime.Goexit() }

func (f *fakeT) runCleanups() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

// run calls fn as a test would, in a goroutine of its own, and returns
// once fn returned or failed.
func (f *fakeT) run(fn func()) {
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	<-done
}

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	Eventually(t, time.Minute, "the fifth call", func() bool { calls++; return calls == 5 })
	if calls != 5 {
		t.Fatalf("cond called %d times, want 5: Eventually returns as soon as it holds", calls)
	}
}

func TestEventuallyFailsWithWhatItWaitedFor(t *testing.T) {
	ft := &fakeT{}
	calls := 0
	returned := false
	ft.run(func() {
		Eventually(ft, 20*time.Millisecond, "the impossible", func() bool { calls++; return false })
		returned = true
	})
	if returned || !strings.Contains(ft.failed, "waiting for the impossible") {
		t.Fatalf("returned %v, failed %q: want a failure that says what it waited for", returned, ft.failed)
	}
	if calls < 2 {
		t.Fatalf("cond called %d times before the failure, want it polled", calls)
	}
}

func TestLogWriterStopsWithTheCleanups(t *testing.T) {
	ft := &fakeT{}
	w := LogWriter(ft)
	if len(ft.cleanups) != 1 {
		t.Fatalf("%d cleanups registered, want 1 (the one that stops the writer)", len(ft.cleanups))
	}
	fmt.Fprintln(w, "during the test")
	ft.runCleanups()
	if n, err := fmt.Fprintln(w, "after the test"); n == 0 || err != nil {
		t.Fatalf("write after the cleanups: %d, %v; want it dropped quietly", n, err)
	}
	if len(ft.logs) != 1 || ft.logs[0] != "during the test" {
		t.Fatalf("logged %q, want only the write before the cleanups, less its newline", ft.logs)
	}
}

func TestLoggerLogsToTheTestAtItsLevel(t *testing.T) {
	ft := &fakeT{}
	l := Logger(ft, "unit", hclog.Info)
	l.Debug("below the level")
	l.Info("shown", "k", 1)
	ft.runCleanups()
	l.Info("after the test")
	if len(ft.logs) != 1 || !strings.Contains(ft.logs[0], "[INFO]  unit: shown: k=1") {
		t.Fatalf("logged %q, want the one Info line before the cleanups", ft.logs)
	}
}

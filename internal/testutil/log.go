package testutil

import (
	"io"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// LogT is what LogWriter needs of a test: testing.TB has it, and so does a
// stand-in for TestMain (nodetest.Main).
type LogT interface {
	Log(args ...any)
	Cleanup(func())
}

// LogWriter returns a writer that sends each write to t.Log, less its
// trailing newline, until t's cleanups have run; later writes are dropped.
// Raft's transport can log after a node's Shutdown returns, and t.Log
// after the test ended would panic.
//
// The writer stops in a cleanup registered now, which runs after the ones
// registered later (cleanups run last first): call LogWriter before
// starting what logs through it.
func LogWriter(t LogT) io.Writer {
	w := &logWriter{t: t}
	t.Cleanup(w.stop)
	return w
}

type logWriter struct {
	mu   sync.Mutex
	t    LogT
	done bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *logWriter) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
}

// Logger is an hclog.Logger named name that logs at level and above to
// t.Log through a LogWriter (call it before starting what logs through
// it), with the time of day to the millisecond.
func Logger(t LogT, name string, level hclog.Level) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name: name, Output: LogWriter(t), Level: level, TimeFormat: "15:04:05.000",
	})
}

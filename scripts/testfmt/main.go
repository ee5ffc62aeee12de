// Command testfmt turns `go test -json` into what a person waiting for the
// tests wants to see: go test's own per-package lines (ok, FAIL, no test
// files) as each package ends, a line every 30 s naming the packages still
// running and for how long, and the whole output of every test that failed
// (and of a package that failed outside a test). scripts/test pipes the
// suite through it. It exits 1 if any test or package failed.
//
// It is a development tool, not API: it exports nothing and makes no
// compatibility promise.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

type event struct {
	Time        time.Time
	Action      string
	Package     string
	ImportPath  string
	Test        string
	Output      string
	Elapsed     float64
	FailedBuild string
}

type state struct {
	mu      sync.Mutex
	out     io.Writer
	started map[string]time.Time         // running packages
	tests   map[string]map[string]string // package -> test -> output so far
	failed  bool
	begin   time.Time
}

func main() {
	if !format(os.Stdin, os.Stdout, 30*time.Second) {
		os.Exit(1)
	}
}

// format copies go test -json from in to out as text, with a progress
// line every interval, and reports whether everything passed.
func format(in io.Reader, out io.Writer, every time.Duration) bool {
	s := &state{out: out, started: map[string]time.Time{}, tests: map[string]map[string]string{}, begin: time.Now()}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.progress(done, every) }()
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			s.mu.Lock()
			s.print(sc.Text() + "\n") // not test2json: pass it on
			s.mu.Unlock()
			continue
		}
		s.handle(e)
	}
	close(done)
	wg.Wait()
	return !s.failed
}

func (s *state) print(text string) {
	fmt.Fprint(s.out, text)
}

func (s *state) handle(e event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch e.Action {
	case "build-output":
		s.print(e.Output)
	case "build-fail":
		s.failed = true
	case "start":
		s.started[e.Package] = time.Now()
	case "output":
		if e.Test == "" {
			// The package's own lines: ok, FAIL, a panic outside a
			// test; not the bare PASS go test itself leaves out.
			if e.Output != "PASS\n" {
				s.print(e.Output)
			}
			return
		}
		if s.tests[e.Package] == nil {
			s.tests[e.Package] = map[string]string{}
		}
		s.tests[e.Package][e.Test] += e.Output
	case "pass", "skip", "fail":
		if e.Action == "fail" {
			s.failed = true
		}
		if e.Test != "" {
			if e.Action == "fail" {
				s.print(s.tests[e.Package][e.Test])
			}
			delete(s.tests[e.Package], e.Test)
			return
		}
		// The package ended. Output of tests that never ended (a
		// panic, a timeout) belongs to its failure.
		if e.Action == "fail" {
			names := make([]string, 0, len(s.tests[e.Package]))
			for name := range s.tests[e.Package] {
				names = append(names, name)
			}
			sort.Strings(names)
			for _, name := range names {
				s.print(s.tests[e.Package][name])
			}
		}
		delete(s.tests, e.Package)
		delete(s.started, e.Package)
	}
}

// progress names the running packages every interval.
func (s *state) progress(done <-chan struct{}, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		s.mu.Lock()
		var running []string
		for pkg, at := range s.started {
			running = append(running, fmt.Sprintf("%s (%s)", pkg, time.Since(at).Round(time.Second)))
		}
		sort.Strings(running)
		if len(running) > 0 {
			s.print(fmt.Sprintf("... %s: still running: %s\n", time.Since(s.begin).Round(time.Second), strings.Join(running, ", ")))
		}
		s.mu.Unlock()
	}
}

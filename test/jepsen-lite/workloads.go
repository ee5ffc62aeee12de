package main

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/lockcluster/lockcluster"
)

// The workloads. Each worker runs one; every exclusive holder writes its
// token to the fenced register for each name it holds.
const (
	wMutex       = "mutex"       // exclusive mutex on mutex-0, mutex-1
	wLease       = "lease"       // long holds on lease-0 (up to 1.5 TTL): jeopardy must end them before anyone else is granted
	wRW          = "rw"          // readers-writer on rw-0: mostly shared, some exclusive
	wIfAvailable = "ifavailable" // ifAvailable and plain requests on ia-0
	wSteal       = "steal"       // steal and plain requests on st-0
	wTimeout     = "timeout"     // short deadlines (abort by timeout) on to-0
	wScoped      = "scoped"      // scoped requests over two or three of sc-0..sc-3
	wRecords     = "records"     // records on rec-0, rec-1: exclusive writers, readers (records.go)
	wQuery       = "query"       // an observer: queries only
)

var allWorkloads = []string{wMutex, wLease, wRW, wSteal, wScoped, wIfAvailable, wTimeout, wRecords}

// linearizable reports whether a name's operations are checked with the
// mutex model (exclusive, one name per request; see check_lin.go).
func linearizable(name string) bool {
	for _, p := range []string{"mutex-", "lease-", "ia-", "st-", "rec-"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// blocking reports whether a workload's requests wait in the queue with a
// generous deadline, so that after healing each must be granted (the
// liveness checker).
func blocking(workload string) bool {
	switch workload {
	case wMutex, wRW, wScoped:
		return true
	}
	return false
}

func parseWorkloads(s string) ([]string, error) {
	if s == "" || s == "all" {
		return allWorkloads, nil
	}
	var out []string
	for _, w := range strings.Split(s, ",") {
		w = strings.TrimSpace(w)
		found := false
		for _, k := range allWorkloads {
			found = found || k == w
		}
		if !found {
			return nil, fmt.Errorf("unknown workload %q (have %s, all)", w, strings.Join(allWorkloads, ", "))
		}
		out = append(out, w)
	}
	return out, nil
}

func (w *worker) ms(lo, hi int) time.Duration {
	return time.Duration(lo+w.rng.Intn(hi-lo+1)) * time.Millisecond
}

// step performs one operation of the worker's workload.
func (w *worker) step() {
	ex := lockcluster.Options{}
	long := w.cfg.OpTimeout
	switch w.cfg.Workload {
	case wMutex:
		name := fmt.Sprintf("mutex-%d", w.rng.Intn(2))
		w.request([]string{name}, ex, long, false, w.fenced(3, w.ms(5, 30)))
	case wLease:
		w.request([]string{"lease-0"}, ex, 4*w.cfg.TTL, false, w.lease(w.ms(100, int(3*w.cfg.TTL/2/time.Millisecond))))
	case wRW:
		o := ex
		if w.rng.Intn(10) < 7 {
			o.Mode = lockcluster.Shared
		}
		w.request([]string{"rw-0"}, o, long, false, w.fenced(2, w.ms(5, 30)))
	case wIfAvailable:
		o := ex
		o.IfAvailable = w.rng.Intn(10) < 6
		w.request([]string{"ia-0"}, o, long, false, w.fenced(2, w.ms(5, 40)))
	case wSteal:
		o := ex
		o.Steal = w.rng.Intn(4) == 0
		w.request([]string{"st-0"}, o, long, false, w.fenced(3, w.ms(20, 80)))
	case wTimeout:
		w.request([]string{"to-0"}, ex, w.ms(10, 150), true, w.fenced(2, w.ms(30, 100)))
	case wScoped:
		perm := w.rng.Perm(4)[:2+w.rng.Intn(2)]
		sort.Ints(perm)
		names := make([]string, len(perm))
		for i, p := range perm {
			names[i] = fmt.Sprintf("sc-%d", p)
		}
		w.request(names, ex, long, false, w.fenced(2, w.ms(5, 30)))
	case wRecords:
		w.records()
	case wQuery:
		w.query()
		time.Sleep(w.ms(50, 250))
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"time"

	"github.com/lockcluster/lockcluster"
)

// workerConfig is one client process's part of the workload. Client
// processes (external ones too) run with the same code: a worker.
type workerConfig struct {
	Process   int           `json:"process"`
	Workload  string        `json:"workload"`
	Endpoints []string      `json:"endpoints"`
	Namespace string        `json:"namespace"`
	TTL       time.Duration `json:"ttl"`
	OpTimeout time.Duration `json:"opTimeout"`
	Seed      int64         `json:"seed"`
	// Register is the URL of the fenced register (client processes).
	Register string `json:"register,omitempty"`
}

// worker runs one client process: one session, one operation at a time,
// like a Jepsen process.
type worker struct {
	cfg  workerConfig
	sink Sink
	reg  Writer
	rng  *rand.Rand
	c    *lockcluster.Client
	seq  int
}

func newWorker(cfg workerConfig, sink Sink, reg Writer) *worker {
	return &worker{cfg: cfg, sink: sink, reg: reg, rng: rand.New(rand.NewSource(cfg.Seed))}
}

// run performs operations until ctx ends, then closes the session. An
// operation under way when ctx ends runs to its own end (each has its own
// deadline), so that the history has its outcome.
func (w *worker) run(ctx context.Context) {
	if !w.dial(ctx) {
		return
	}
	for ctx.Err() == nil {
		w.step()
		sleepCtx(ctx, time.Duration(w.rng.Intn(10))*time.Millisecond)
	}
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = w.c.Close(cctx)
}

func (w *worker) dial(ctx context.Context) bool {
	eps := rotate(w.cfg.Endpoints, w.cfg.Process)
	for backoff := 100 * time.Millisecond; ctx.Err() == nil; backoff = min(2*backoff, 2*time.Second) {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := lockcluster.Dial(dctx, eps, lockcluster.WithNamespace(w.cfg.Namespace), lockcluster.WithTTL(w.cfg.TTL),
			lockcluster.WithLabel(label(w.cfg.Process)))
		cancel()
		if err == nil {
			w.c = c
			return true
		}
		sleepCtx(ctx, backoff)
	}
	return false
}

// label names a process's sessions, so that queries tell whose they are.
func label(process int) string { return fmt.Sprintf("jepsen-p%d", process) }

// rotate starts each process's endpoint list at another node, so that
// sessions spread over the nodes.
func rotate(eps []string, by int) []string {
	if len(eps) == 0 {
		return nil
	}
	by = (by%len(eps) + len(eps)) % len(eps)
	return append(append([]string(nil), eps[by:]...), eps[:by]...)
}

func (w *worker) add(op Op) {
	op.Process, op.Workload = w.cfg.Process, w.cfg.Workload
	w.sink.Add(op)
}

// request is one lock request: Request (or Acquire with useAcquire), the
// hold, the release, all recorded.
func (w *worker) request(names []string, opts lockcluster.Options, timeout time.Duration, useAcquire bool, hold func(ctx context.Context, l *lockcluster.Lock, h string)) {
	w.seq++
	h := fmt.Sprintf("%d/%d", w.cfg.Process, w.seq)
	opts.Scope = names[1:]
	inv := Op{Type: "invoke", F: "acquire", Hold: h, Names: names, Mode: opts.Mode.String(), IfAvailable: opts.IfAvailable,
		Steal: opts.Steal, TimeoutMs: timeout.Milliseconds(), Session: w.c.SessionID()}
	w.add(inv)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var granted, answered bool
	body := func(lctx context.Context, l *lockcluster.Lock) {
		answered = true
		if l == nil {
			w.add(Op{Type: "ok", F: "acquire", Hold: h, Names: names, Result: "not-available", Session: w.c.SessionID()})
			return
		}
		granted = true
		w.add(Op{Type: "ok", F: "acquire", Hold: h, Names: names, Mode: inv.Mode, Steal: opts.Steal, Result: "granted", Token: l.Token(), Session: w.c.SessionID()})
		context.AfterFunc(lctx, func() { w.lost(lctx, h, names, l.Token()) })
		hold(lctx, l, h)
		w.add(Op{Type: "invoke", F: "release", Hold: h, Names: names, Token: l.Token()})
	}
	var err error
	if useAcquire {
		var l *lockcluster.Lock
		if l, err = w.c.Acquire(ctx, names[0], opts); err == nil {
			body(l.Context(), l)
			rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
			err = l.Release(rctx)
			rcancel()
		}
	} else {
		err = w.c.Request(ctx, names[0], opts, func(lctx context.Context, l *lockcluster.Lock) error {
			body(lctx, l)
			return nil
		})
	}
	switch {
	case granted && err == nil:
		w.add(Op{Type: "ok", F: "release", Hold: h, Names: names, Result: "released"})
	case granted:
		w.add(Op{Type: "info", F: "release", Hold: h, Names: names, Error: err.Error()})
	case answered:
	case errors.Is(err, context.DeadlineExceeded):
		w.add(Op{Type: "fail", F: "acquire", Hold: h, Names: names, Result: "aborted", Error: "timeout: " + err.Error(), Session: w.c.SessionID()})
	case err != nil:
		w.add(Op{Type: "info", F: "acquire", Hold: h, Names: names, Error: err.Error(), Session: w.c.SessionID()})
	default:
		w.add(Op{Type: "info", F: "acquire", Hold: h, Names: names, Error: "no lock and no error"})
	}
}

// lost records the end of a hold that its holder did not release itself:
// stolen, session lost (jeopardy or expiry), the request's deadline, or a
// record write the cluster refused.
func (w *worker) lost(lctx context.Context, h string, names []string, token uint64) {
	cause := context.Cause(lctx)
	kind := "other"
	switch {
	case errors.Is(cause, lockcluster.ErrReleased):
		return
	case errors.Is(cause, lockcluster.ErrNotHolder):
		kind = notHolder // a release with a record refused: the lock had been lost (records.go)
	case errors.Is(cause, lockcluster.ErrStolen):
		kind = "stolen"
	case errors.Is(cause, lockcluster.ErrSessionLost):
		kind = "session"
	case errors.Is(cause, context.DeadlineExceeded), errors.Is(cause, context.Canceled):
		kind = "deadline"
	}
	w.add(Op{Type: "event", F: "lost", Hold: h, Names: names, Token: token, Result: kind, Value: fmt.Sprint(cause)})
}

// write offers the lock's token to the fenced register for each name.
func (w *worker) write(h string, l *lockcluster.Lock) {
	for _, n := range l.Names() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = w.reg.Write(ctx, w.cfg.Process, h, n, l.Token())
		cancel()
	}
}

// fenced is the body of an exclusive hold: write the token at once, then
// a few times "check the lock, work, write". A pause between the check
// and the write (a GC pause, SIGSTOP) makes the write late: the register
// must refuse it if a newer holder has written.
func (w *worker) fenced(writes int, work time.Duration) func(context.Context, *lockcluster.Lock, string) {
	return func(lctx context.Context, l *lockcluster.Lock, h string) {
		if l.Mode() != lockcluster.Exclusive {
			time.Sleep(work)
			return
		}
		w.write(h, l)
		for i := 1; i < writes; i++ {
			if lctx.Err() != nil {
				return
			}
			time.Sleep(time.Duration(w.rng.Int63n(int64(work) + 1)))
			w.write(h, l)
		}
	}
}

// lease is the body of a long hold: write the token every 50ms for d,
// checking the lock before each write, as a lease holder would.
func (w *worker) lease(d time.Duration) func(context.Context, *lockcluster.Lock, string) {
	return func(lctx context.Context, l *lockcluster.Lock, h string) {
		for end := time.Now().Add(d); time.Now().Before(end) && lctx.Err() == nil; {
			w.write(h, l)
			sleepCtx(lctx, 50*time.Millisecond)
		}
	}
}

// query records a snapshot of the namespace.
func (w *worker) query() {
	w.add(Op{Type: "invoke", F: "query"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := w.c.Query(ctx)
	if err != nil {
		w.add(Op{Type: "fail", F: "query", Error: err.Error()})
		return
	}
	w.add(Op{Type: "ok", F: "query", Held: qlocks(s.Held), Pending: qlocks(s.Pending)})
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// qlocks converts a query's (or a watch snapshot's) locks as the history
// keeps them.
func qlocks(in []lockcluster.LockInfo) []QLock {
	out := make([]QLock, len(in))
	for i, l := range in {
		out[i] = QLock{Name: l.Name, Mode: l.Mode, Session: l.SessionID, Request: l.RequestID, Token: l.Token, Label: l.Label}
	}
	return out
}

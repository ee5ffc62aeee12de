package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockcluster/lockcluster"
)

// The records workload (SPEC §12) on rec-0 and rec-1. A writer takes a
// name's lock exclusively (one request in eight steals it), reads the
// record the grant carried, writes one to three records of its own
// (Lock.SetRecord, one in ten a DeleteRecord), each value naming the hold,
// the write and the grant's token, and releases: half the time with one
// more write in the release (ReleaseWithRecord). A reader reads a name's
// record with Client.Record. Every operation goes into the history:
//
//   - acquire: as every workload's (worker.request); its ok carries the
//     record the grant carried (Rec; Rec.None when there was none);
//   - rec-set / rec-delete: invoke (Rec.Value, the grant's Token), then ok
//     with the record as the cluster wrote it, fail with Result
//     "not-holder" (refused: the lock was lost; nothing changed), or info
//     (any other error: it may have been applied, or may still be; a
//     refusal of the leader's protocol level gate too, as it may answer a
//     retry of an attempt that was applied);
//   - release: its invoke carries Rec when it writes a record too; its ok
//     the record written, fail "not-holder" when the release with record
//     was refused (the lock had been lost), info unknown;
//   - rec-read: invoke, then ok with Rec (Rec.None: no record), fail.
//
// check_records.go checks it.

// RecInfo is a record as the history keeps it.
type RecInfo struct {
	Name  string `json:"name,omitempty"`
	Value string `json:"value,omitempty"`
	None  bool   `json:"none,omitempty"` // no record (a read's answer, a grant that carried none)
	Token uint64 `json:"token,omitempty"`
	Index uint64 `json:"index,omitempty"`
}

func recInfo(r lockcluster.Record, ok bool) *RecInfo {
	if !ok {
		return &RecInfo{None: true}
	}
	return &RecInfo{Name: r.Name, Value: string(r.Value), Token: r.Token, Index: r.Index}
}

// notHolder is the Result of a record write the cluster refused because
// the writer's lock was lost; also the kind of the loss it tells of.
const notHolder = "not-holder"

// records performs one step of the records workload.
func (w *worker) records() {
	name := fmt.Sprintf("rec-%d", w.rng.Intn(2))
	if w.rng.Intn(10) < 3 {
		w.readRecord(name)
		time.Sleep(w.ms(0, 20))
		return
	}
	w.writeRecords(name, w.rng.Intn(8) == 0)
}

func (w *worker) readRecord(name string) {
	w.add(Op{Type: "invoke", F: "rec-read", Names: []string{name}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec, ok, err := w.c.Record(ctx, name)
	if err != nil {
		w.add(Op{Type: "fail", F: "rec-read", Names: []string{name}, Error: err.Error()})
		return
	}
	w.add(Op{Type: "ok", F: "rec-read", Names: []string{name}, Rec: recInfo(rec, ok)})
}

// writeRecords is one writer's hold: acquire, read what the grant carried,
// write, release. It stops writing at the first write that is refused or
// whose outcome is unknown, and releases.
func (w *worker) writeRecords(name string, steal bool) {
	w.seq++
	h := fmt.Sprintf("%d/%d", w.cfg.Process, w.seq)
	names := []string{name}
	w.add(Op{Type: "invoke", F: "acquire", Hold: h, Names: names, Mode: "exclusive", Steal: steal,
		TimeoutMs: w.cfg.OpTimeout.Milliseconds(), Session: w.c.SessionID()})
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.OpTimeout)
	l, err := w.c.Acquire(ctx, name, lockcluster.Options{Steal: steal})
	cancel()
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		w.add(Op{Type: "fail", F: "acquire", Hold: h, Names: names, Result: "aborted", Error: "timeout: " + err.Error(), Session: w.c.SessionID()})
		return
	case err != nil:
		w.add(Op{Type: "info", F: "acquire", Hold: h, Names: names, Error: err.Error(), Session: w.c.SessionID()})
		return
	}
	tok := l.Token()
	carried, had := l.Record(name)
	w.add(Op{Type: "ok", F: "acquire", Hold: h, Names: names, Mode: "exclusive", Steal: steal, Result: "granted", Token: tok,
		Session: w.c.SessionID(), Rec: recInfo(carried, had)})
	lctx := l.Context()
	context.AfterFunc(lctx, func() { w.lost(lctx, h, names, tok) })

	writes := 1 + w.rng.Intn(3)
	ok := true
	for k := 0; k < writes && ok && lctx.Err() == nil; k++ {
		if k > 0 {
			time.Sleep(w.ms(2, 20))
		}
		ok = w.writeRecord(l, h, name, k, w.rng.Intn(10) == 0)
	}

	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	if ok && lctx.Err() == nil && w.rng.Intn(2) == 0 {
		v := recValue(h, writes, tok)
		w.add(Op{Type: "invoke", F: "release", Hold: h, Names: names, Token: tok, Rec: &RecInfo{Value: v}})
		rec, err := l.ReleaseWithRecord(rctx, name, []byte(v))
		switch {
		case err == nil:
			w.add(Op{Type: "ok", F: "release", Hold: h, Names: names, Result: "released", Rec: recInfo(rec, true)})
		case errors.Is(err, lockcluster.ErrNotHolder):
			w.add(Op{Type: "fail", F: "release", Hold: h, Names: names, Result: notHolder, Error: err.Error()})
		default:
			w.add(Op{Type: "info", F: "release", Hold: h, Names: names, Error: err.Error()})
		}
		return
	}
	w.add(Op{Type: "invoke", F: "release", Hold: h, Names: names, Token: tok})
	if err := l.Release(rctx); err != nil {
		w.add(Op{Type: "info", F: "release", Hold: h, Names: names, Error: err.Error()})
		return
	}
	w.add(Op{Type: "ok", F: "release", Hold: h, Names: names, Result: "released"})
}

// recValue is the k-th value hold h writes: unique in the run, and naming
// the grant's token.
func recValue(h string, k int, token uint64) string {
	return fmt.Sprintf("%s#%d token %d", h, k, token)
}

// writeRecord writes (or deletes) the record of name under l; false when
// the write was refused or its outcome is unknown.
func (w *worker) writeRecord(l *lockcluster.Lock, h, name string, k int, del bool) bool {
	tok := l.Token()
	f, v := "rec-set", recValue(h, k, tok)
	if del {
		f, v = "rec-delete", ""
	}
	names := []string{name}
	w.add(Op{Type: "invoke", F: f, Hold: h, Names: names, Token: tok, Rec: &RecInfo{Value: v}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var rec lockcluster.Record
	var err error
	if del {
		err = l.DeleteRecord(ctx, name)
	} else {
		rec, err = l.SetRecord(ctx, name, []byte(v))
	}
	switch {
	case err == nil && del:
		w.add(Op{Type: "ok", F: f, Hold: h, Names: names, Token: tok, Rec: &RecInfo{None: true}})
		return true
	case err == nil:
		w.add(Op{Type: "ok", F: f, Hold: h, Names: names, Token: tok, Rec: recInfo(rec, true)})
		return true
	case errors.Is(err, lockcluster.ErrNotHolder):
		w.add(Op{Type: "fail", F: f, Hold: h, Names: names, Token: tok, Result: notHolder, Error: err.Error()})
		// The cluster says the lock is gone: the holder knows it now.
		w.add(Op{Type: "event", F: "lost", Hold: h, Names: names, Token: tok, Result: notHolder, Value: err.Error()})
		return false
	default:
		w.add(Op{Type: "info", F: f, Hold: h, Names: names, Token: tok, Error: err.Error()})
		return false
	}
}

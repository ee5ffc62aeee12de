package main

import (
	"strings"
	"testing"
)

// Hand-made histories of the records workload (records.go); times in ms.

// recGrant records hold id of process p granted name with token, carrying
// the record carried (nil: none).
func (b *hb) recGrant(p int, id, name string, invoke, ok int64, token uint64, carried *RecInfo) *hb {
	if carried == nil {
		carried = &RecInfo{None: true}
	}
	b.add(invoke, Op{Process: p, Type: "invoke", F: "acquire", Hold: id, Workload: wRecords, Names: []string{name}, Mode: "exclusive"})
	return b.add(ok, Op{Process: p, Type: "ok", F: "acquire", Hold: id, Names: []string{name}, Mode: "exclusive", Result: "granted",
		Token: token, Session: uint64(p), Rec: carried})
}

// recSet records a write of value by hold id; outcome ok (applied at
// index, with token), fail (not-holder) or info.
func (b *hb) recSet(p int, id, name string, invoke, done int64, value string, token uint64, outcome string, index uint64) *hb {
	b.add(invoke, Op{Process: p, Type: "invoke", F: "rec-set", Hold: id, Names: []string{name}, Token: token, Rec: &RecInfo{Value: value}})
	op := Op{Process: p, Type: outcome, F: "rec-set", Hold: id, Names: []string{name}, Token: token}
	switch outcome {
	case "ok":
		op.Rec = &RecInfo{Name: name, Value: value, Token: token, Index: index}
	case "fail":
		op.Result = notHolder
	}
	return b.add(done, op)
}

func (b *hb) recRelease(p int, id, name string, invoke, done int64) *hb {
	b.add(invoke, Op{Process: p, Type: "invoke", F: "release", Hold: id, Names: []string{name}})
	return b.add(done, Op{Process: p, Type: "ok", F: "release", Hold: id, Names: []string{name}, Result: "released"})
}

// recReleaseWith records a release with the record value, applied at index.
func (b *hb) recReleaseWith(p int, id, name string, invoke, done int64, value string, token, index uint64) *hb {
	b.add(invoke, Op{Process: p, Type: "invoke", F: "release", Hold: id, Names: []string{name}, Token: token, Rec: &RecInfo{Value: value}})
	return b.add(done, Op{Process: p, Type: "ok", F: "release", Hold: id, Names: []string{name}, Result: "released",
		Rec: &RecInfo{Name: name, Value: value, Token: token, Index: index}})
}

// recRead records a read answered with rec (nil: no record).
func (b *hb) recRead(p int, name string, invoke, done int64, rec *RecInfo) *hb {
	if rec == nil {
		rec = &RecInfo{None: true}
	}
	b.add(invoke, Op{Process: p, Type: "invoke", F: "rec-read", Names: []string{name}})
	return b.add(done, Op{Process: p, Type: "ok", F: "rec-read", Names: []string{name}, Rec: rec})
}

func rec(name, value string, token, index uint64) *RecInfo {
	return &RecInfo{Name: name, Value: value, Token: token, Index: index}
}

// twoWriters: 1/1 (token 5) writes a at 6 and releases; 2/1 (token 8)
// sees a, writes b with its release at 9; a reader sees b.
func twoWriters() *hb {
	b := new(hb).recGrant(1, "1/1", "rec-0", 0, 10, 5, nil)
	b.recSet(1, "1/1", "rec-0", 11, 15, "a", 5, "ok", 6).recRelease(1, "1/1", "rec-0", 16, 20)
	b.recGrant(2, "2/1", "rec-0", 12, 25, 8, rec("rec-0", "a", 5, 6))
	b.recReleaseWith(2, "2/1", "rec-0", 30, 35, "b", 8, 9)
	b.recRead(3, "rec-0", 2, 4, nil)
	return b.recRead(3, "rec-0", 40, 45, rec("rec-0", "b", 8, 9))
}

func TestRecordsGood(t *testing.T) {
	ops := twoWriters().end(100)
	for _, c := range []string{cRecLin, cRecFence, cMutex, cLin, cLive, cLost} {
		wantValid(t, ops, c)
	}
	r := check(t, ops, cRecFence)
	if !strings.Contains(strings.Join(r.Notes, "\n"), "record writes: 1 ok") {
		t.Errorf("notes: %v", r.Notes)
	}
}

// A read after b was acknowledged that returns a: not linearizable.
func TestRecordsStaleRead(t *testing.T) {
	ops := twoWriters().recRead(4, "rec-0", 50, 55, rec("rec-0", "a", 5, 6)).end(100)
	wantInvalid(t, ops, cRecLin, "rec-0: the record is not linearizable")
	wantValid(t, ops, cRecFence)
	// A read of no record while one was there.
	ops = twoWriters().recRead(4, "rec-0", 50, 55, nil).end(100)
	wantInvalid(t, ops, cRecLin, "not linearizable")
	// A grant that carried what its predecessor wrote before the last write.
	b := twoWriters().recGrant(5, "5/1", "rec-0", 50, 60, 11, rec("rec-0", "a", 5, 6)).recRelease(5, "5/1", "rec-0", 61, 62)
	wantInvalid(t, b.end(100), cRecLin, "not linearizable")
}

// A write of the first holder applied after the second holder's grant (an
// index past its token): a stale token accepted.
func TestRecordsStaleToken(t *testing.T) {
	b := new(hb).recGrant(1, "1/1", "rec-0", 0, 10, 5, nil)
	b.recGrant(2, "2/1", "rec-0", 12, 25, 8, nil).recRelease(2, "2/1", "rec-0", 26, 27)
	b.recSet(1, "1/1", "rec-0", 11, 30, "late", 5, "ok", 12).recRelease(1, "1/1", "rec-0", 31, 32)
	wantInvalid(t, b.end(100), cRecFence, "a stale holder's write was accepted")

	// A write answered with another token than its grant's.
	c := new(hb).recGrant(1, "1/1", "rec-0", 0, 10, 5, nil)
	c.add(11, Op{Process: 1, Type: "invoke", F: "rec-set", Hold: "1/1", Names: []string{"rec-0"}, Token: 5, Rec: &RecInfo{Value: "x"}})
	c.add(12, Op{Process: 1, Type: "ok", F: "rec-set", Hold: "1/1", Names: []string{"rec-0"}, Token: 5, Rec: rec("rec-0", "x", 4, 7)})
	c.recRelease(1, "1/1", "rec-0", 13, 14)
	wantInvalid(t, c.end(100), cRecFence, "wrote with token 4, but its grant's token is 5")

	// A record no writer wrote.
	d := twoWriters().recRead(4, "rec-0", 50, 55, rec("rec-0", "ghost", 8, 9))
	wantInvalid(t, d.end(100), cRecFence, "which no writer wrote")
}

// A write refused with ErrNotHolder changed nothing and is fine; one of
// unknown outcome may have been applied (a later grant carries it), or not.
func TestRecordsRefusedAndUnknown(t *testing.T) {
	b := new(hb).recGrant(1, "1/1", "rec-0", 0, 10, 5, nil)
	b.recSet(1, "1/1", "rec-0", 11, 15, "a", 5, "ok", 6)
	b.recSet(1, "1/1", "rec-0", 16, 20, "refused", 5, "fail", 0)
	b.add(20, Op{Process: 1, Type: "event", F: "lost", Hold: "1/1", Names: []string{"rec-0"}, Result: notHolder})
	b.recRelease(1, "1/1", "rec-0", 21, 22)
	b.recRead(3, "rec-0", 30, 35, rec("rec-0", "a", 5, 6))
	ops := b.end(100)
	for _, c := range []string{cRecLin, cRecFence, cMutex, cLin} {
		wantValid(t, ops, c)
	}
	if r := check(t, ops, cRecFence); !strings.Contains(strings.Join(r.Notes, "\n"), "record writes: 1 ok, 1 refused") {
		t.Errorf("notes: %v", r.Notes)
	}

	for _, applied := range []bool{true, false} {
		u := new(hb).recGrant(1, "1/1", "rec-0", 0, 10, 5, nil)
		u.recSet(1, "1/1", "rec-0", 11, 15, "maybe", 5, "info", 0)
		u.recRelease(1, "1/1", "rec-0", 16, 20)
		var carried *RecInfo
		if applied {
			carried = rec("rec-0", "maybe", 5, 7)
		}
		u.recGrant(2, "2/1", "rec-0", 30, 40, 9, carried).recRelease(2, "2/1", "rec-0", 41, 42)
		wantValid(t, u.end(100), cRecLin)
	}
	// Its effect cannot appear after the holder's release was confirmed.
	u := new(hb).recGrant(1, "1/1", "rec-0", 0, 10, 5, nil)
	u.recSet(1, "1/1", "rec-0", 11, 15, "maybe", 5, "info", 0)
	u.recRelease(1, "1/1", "rec-0", 16, 20)
	u.recRead(3, "rec-0", 25, 26, nil)
	u.recRead(3, "rec-0", 30, 31, rec("rec-0", "maybe", 5, 7))
	wantInvalid(t, u.end(100), cRecLin, "not linearizable")
}

// A retried release with record that found its write applied is answered
// without the index: not a violation.
func TestRecordsReleaseWithoutIndex(t *testing.T) {
	b := new(hb).recGrant(1, "1/1", "rec-0", 0, 10, 5, nil)
	b.add(11, Op{Process: 1, Type: "invoke", F: "release", Hold: "1/1", Names: []string{"rec-0"}, Token: 5, Rec: &RecInfo{Value: "a"}})
	b.add(12, Op{Process: 1, Type: "ok", F: "release", Hold: "1/1", Names: []string{"rec-0"}, Result: "released", Rec: &RecInfo{Name: "rec-0", Value: "a", Token: 5}})
	b.recRead(2, "rec-0", 20, 21, rec("rec-0", "a", 5, 7))
	ops := b.end(100)
	wantValid(t, ops, cRecFence)
	wantValid(t, ops, cRecLin)
}

// With the log's history, each grant's record is compared with the log's
// record of the name at the grant's index.
func TestRecordsGrantAgainstTheLog(t *testing.T) {
	withLog := func(b *hb) []Op {
		b.add(90, Op{Process: finalProcess, Type: "ok", F: "log-range", Index: 1, To: 20})
		b.add(91, Op{Process: finalProcess, Type: "event", F: "log", Index: 6,
			Changes: []WChange{{Kind: "record-set", Names: []string{"rec-0"}, Token: 5, Rec: rec("rec-0", "a", 5, 6)}}})
		b.add(91, Op{Process: finalProcess, Type: "event", F: "log", Index: 9,
			Changes: []WChange{{Kind: "record-set", Names: []string{"rec-0"}, Token: 8, Rec: rec("rec-0", "b", 8, 9)}}})
		return b.end(100)
	}
	ops := withLog(twoWriters())
	wantValid(t, ops, cRecFence)
	if r := check(t, ops, cRecFence); !strings.Contains(strings.Join(r.Notes, "\n"), "2 grants' records compared") {
		t.Errorf("notes: %v", r.Notes)
	}
	// The second holder's grant (token 8) carried no record: what a
	// retried request whose first answer was lost could report.
	b := new(hb).recGrant(1, "1/1", "rec-0", 0, 10, 5, nil)
	b.recSet(1, "1/1", "rec-0", 11, 15, "a", 5, "ok", 6).recRelease(1, "1/1", "rec-0", 16, 20)
	b.recGrant(2, "2/1", "rec-0", 12, 25, 8, nil)
	b.recReleaseWith(2, "2/1", "rec-0", 30, 35, "b", 8, 9)
	wantInvalid(t, withLog(b), cRecFence, `the grant of 2/1 (token 8) at 0.025s carried no record, but the log shows the record "a" (token 5, index 6) at index 8`)
}

// A record whose write was refused with ErrNotHolder must never be seen.
func TestRecordsRefusedWriteSeen(t *testing.T) {
	b := new(hb).recGrant(1, "1/1", "rec-0", 0, 10, 5, nil)
	b.recSet(1, "1/1", "rec-0", 11, 15, "refused", 5, "fail", 0)
	b.add(15, Op{Process: 1, Type: "event", F: "lost", Hold: "1/1", Names: []string{"rec-0"}, Result: notHolder})
	b.recRelease(1, "1/1", "rec-0", 16, 17)
	b.recRead(3, "rec-0", 30, 35, rec("rec-0", "refused", 5, 7))
	ops := b.end(100)
	wantInvalid(t, ops, cRecFence, `saw the record "refused" (index 7), but the write "refused" of 1/1 was refused at 0.015s (not-holder)`)
	wantInvalid(t, ops, cRecLin, "not linearizable")
}

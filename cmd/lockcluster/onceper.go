package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/lockcluster/lockcluster"
)

// lock --once-per D: run CMD at most once per period D among every
// machine that runs the same command (cron on several machines, with
// skewed clocks). The lock's record says when the last successful run
// ended; the decision compares two times of the leader's, both carried in
// log entries: the grant's (Lock.AcquiredAt) and the done_at of the
// record. No client's clock takes part.
//
// After CMD exits 0 the run is recorded in two writes of the record of
// NAME: first {"token": T} (its WrittenAt, the leader's time of that
// write, is when the run was known done), then, releasing the lock in the
// same entry, {"done_at": <that WrittenAt>, "token": T}. A record with a
// token and no done_at (the second write did not land) counts as done at
// its WrittenAt.

// onceRecord is the value --once-per writes.
type onceRecord struct {
	DoneAt *time.Time `json:"done_at,omitempty"`
	Token  uint64     `json:"token"`
}

// onceDecision says whether a grant at acquiredAt (the leader's time) may
// run, given the record of the name as the grant carried it: skip when
// the last run was done less than period before the grant. doneAt is the
// last run's done time (zero: none known); note explains a record that is
// not --once-per's.
func onceDecision(rec lockcluster.Record, found bool, acquiredAt time.Time, period time.Duration) (skip bool, doneAt time.Time, note string) {
	if !found {
		return false, time.Time{}, ""
	}
	var v onceRecord
	if err := json.Unmarshal(rec.Value, &v); err != nil || v.Token == 0 {
		return false, time.Time{}, fmt.Sprintf("the record of %q is not --once-per's ({\"done_at\", \"token\"}): ignored, and replaced after a successful run", rec.Name)
	}
	doneAt = rec.WrittenAt
	if v.DoneAt != nil {
		doneAt = *v.DoneAt
	}
	return acquiredAt.Before(doneAt.Add(period)), doneAt, ""
}

// recordRun records a successful run of l's holder and releases l (the
// second write and the release in one entry).
func (r *lockRun) recordRun(ctx context.Context, l *lockcluster.Lock) error {
	first, err := json.Marshal(onceRecord{Token: l.Token()})
	if err != nil {
		return err
	}
	rec, err := l.SetRecord(ctx, r.name, first)
	if err != nil {
		return err
	}
	done := rec.WrittenAt
	second, err := json.Marshal(onceRecord{DoneAt: &done, Token: l.Token()})
	if err != nil {
		return err
	}
	_, err = l.ReleaseWithRecord(ctx, r.name, second)
	return err
}

// clockOffsetEnv, set to a duration, moves this process's idea of the wall
// clock by that much: a test's skewed machine. Only what is shown to the
// user reads that clock (how long ago the last run was); --once-per's
// decision does not, and the tests check that it does not change.
const clockOffsetEnv = "LOCKCLUSTER_TEST_CLOCK_OFFSET"

// localNow is this machine's wall clock, offset by clockOffsetEnv.
func localNow() time.Time {
	now := time.Now()
	if d, err := time.ParseDuration(os.Getenv(clockOffsetEnv)); err == nil {
		now = now.Add(d)
	}
	return now
}

package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
)

// --once-per's decision reads only the leader's times: the grant's and the
// record's done_at (or, for a run whose second write did not land, the
// record's WrittenAt).
func TestOnceDecision(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 2, 15, 0, 0, time.UTC)
	period := 20 * time.Hour
	rec := func(v string, written time.Time) lockcluster.Record {
		return lockcluster.Record{Name: "nightly", Value: []byte(v), Token: 7, WrittenAt: written, Index: 9}
	}
	done := func(at time.Time) string {
		b, _ := json.Marshal(onceRecord{DoneAt: &at, Token: 7})
		return string(b)
	}
	for _, tc := range []struct {
		what    string
		rec     lockcluster.Record
		found   bool
		granted time.Time
		skip    bool
		note    bool
	}{
		{"no record: run", lockcluster.Record{}, false, t0, false, false},
		{"done just now: skip", rec(done(t0), t0.Add(time.Millisecond)), true, t0.Add(time.Second), true, false},
		{"done a period ago: run", rec(done(t0), t0), true, t0.Add(period), false, false},
		{"a nanosecond short of the period: skip", rec(done(t0), t0), true, t0.Add(period - 1), true, false},
		{"only the first write landed: WrittenAt is done_at", rec(`{"token":7}`, t0), true, t0.Add(time.Hour), true, false},
		{"another program's record: run, and say so", rec("v1.4.2", t0), true, t0.Add(time.Hour), false, true},
	} {
		skip, _, note := onceDecision(tc.rec, tc.found, tc.granted, period)
		if skip != tc.skip || (note != "") != tc.note {
			t.Errorf("%s: skip %v note %q", tc.what, skip, note)
		}
	}
	// The local clock (offset by the test hook) is not an input: the
	// decision is a function of the record and the grant alone.
	t.Setenv(clockOffsetEnv, "3h")
	if d := localNow().Sub(time.Now()); d < 3*time.Hour-time.Minute {
		t.Fatalf("the clock hook moved the local clock by %s", d)
	}
	if skip, _, _ := onceDecision(rec(done(t0), t0), true, t0.Add(time.Second), period); !skip {
		t.Fatal("an offset local clock changed the decision")
	}
}

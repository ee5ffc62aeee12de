package main

import (
	"fmt"
	"math"
	"time"
)

// checkResult is one checker's verdict.
type checkResult struct {
	Name       string   `json:"name"`
	Valid      bool     `json:"valid"`
	Count      int      `json:"violations"` // how many; Violations keeps the first maxListed
	Violations []string `json:"list,omitempty"`
	Notes      []string `json:"notes,omitempty"`
}

const maxListed = 50

func (r *checkResult) fail(format string, args ...any) {
	r.Valid = false
	r.Count++
	if len(r.Violations) < maxListed {
		r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
	}
}

func (r *checkResult) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// checkOptions are the bounds the checkers hold the history to.
type checkOptions struct {
	TTL       time.Duration
	OpTimeout time.Duration
	// Settle: after healing, the cluster has this long to recover (a new
	// leader, orphaned locks expired) before every blocking request must
	// be granted.
	Settle time.Duration
	// Out is where the porcupine visualisation goes when linearizability
	// fails ("": nowhere).
	Out        string
	LinTimeout time.Duration
}

// The checkers, in the order they are reported.
const (
	cMutex  = "mutual-exclusion"
	cLin    = "linearizability"
	cFIFO   = "fifo"
	cLive   = "liveness"
	cLost   = "no-lost-ack"
	cDigest = "state-digest"
	// cApplied: equal running hashes of applied entries (check_live.go).
	cApplied = "applied-hash"
	// cRecLin, cRecFence (check_records.go) and cWatch (check_watch.go)
	// are declared with their checkers.
)

// runChecks runs every checker over a history.
func runChecks(ops []Op, o checkOptions) []checkResult {
	hs := analyse(ops)
	recs := recordOps(hs)
	return []checkResult{checkMutex(hs), checkLin(hs, o), checkFIFO(hs), checkLiveness(hs, o), checkLost(hs), checkDigest(hs), checkApplied(hs),
		checkRecordsLinOps(hs, recs, o), checkRecordsFencingOps(hs, recs), checkWatch(hs)}
}

func allValid(rs []checkResult) bool {
	for _, r := range rs {
		if !r.Valid {
			return false
		}
	}
	return true
}

// at formats a time of the history relative to its start.
func (hs *history) at(t int64) string {
	if t == math.MaxInt64 {
		return "end"
	}
	if len(hs.ops) == 0 {
		return "?"
	}
	return fmt.Sprintf("%.3fs", float64(t-hs.ops[0].Time)/1e9)
}

package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// The applied-hash comparison of the final phase. Every node keeps a
// chained SHA-256 over every log entry it applied (index, term, type,
// data; raftnode), so two nodes that ever applied different entries have
// different hashes at every later index, even once their state machines
// agree again (docs/chaos.md, finding 3: the state digests re-converged
// once the sessions involved had closed). The state digest compares where
// the nodes ended; this compares how they got there.

// appliedHashBound bounds the wait for every node to reach the same
// applied index before the hashes are compared at the smallest one.
const appliedHashBound = 30 * time.Second

// appliedHashes polls every node's /debug/digest until each answers and
// all have applied the same index (or bound passes), takes the smallest
// applied_index among them (every node has applied it), asks each node
// for its hash at exactly that index (?at=), and returns the verdict as a
// final-phase entry of the history (F "applied-hash"; ok or fail, for the
// applied-hash checker). It fails when a node cannot be read, does not
// report the running hash, cannot give its hash at the index, reports
// that it fenced itself (diverged), or when the hashes differ.
func appliedHashes(ctx context.Context, c Cluster, bound, every time.Duration) Op {
	fail := func(format string, args ...any) Op {
		return Op{Process: finalProcess, Type: "fail", F: "applied-hash", Value: fmt.Sprintf(format, args...)}
	}
	n := c.Size()
	deadline := time.Now().Add(bound)
	var ds []nodeDigest
	var errs []string
	for {
		ds, errs = make([]nodeDigest, n), nil
		for i := range ds {
			d, err := digestOf(ctx, c, i)
			if err != nil {
				errs = append(errs, fmt.Sprintf("node %d: %v", i, err))
			}
			ds[i] = d
		}
		if len(errs) == 0 {
			same := true
			for i, d := range ds {
				if d.AppliedIndex == nil {
					return fail("%s (node %d) does not report applied_index in /debug/digest: a lockcluster without the running hash of applied entries", d.ID, i)
				}
				same = same && *d.AppliedIndex == *ds[0].AppliedIndex
			}
			if same {
				break
			}
		}
		if !time.Now().Before(deadline) || ctx.Err() != nil {
			break
		}
		sleepCtx(ctx, every)
	}
	if len(errs) > 0 {
		return fail("could not read every node's /debug/digest within %s: %s", bound, strings.Join(errs, "; "))
	}
	at, hi := *ds[0].AppliedIndex, *ds[0].AppliedIndex
	for _, d := range ds {
		at, hi = min(at, *d.AppliedIndex), max(hi, *d.AppliedIndex)
	}
	var problems, parts []string
	for _, d := range ds {
		if d.Diverged != "" {
			problems = append(problems, fmt.Sprintf("%s fenced itself: %s", d.ID, d.Diverged))
		}
	}
	if at == 0 {
		problems = append(problems, "a node has applied nothing")
	}
	hashes := map[string]bool{}
	for i := range ds {
		if at == 0 {
			break
		}
		d, err := digestAt(ctx, c, i, at)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("node %d: %v", i, err))
			continue
		case d.AtIndex != at:
			problems = append(problems, fmt.Sprintf("%s answered ?at=%d with at_index %d", d.ID, at, d.AtIndex))
			continue
		case d.AtHash == "":
			problems = append(problems, fmt.Sprintf("%s has no hash at index %d: %s (applied %v, applied_hash %q)",
				d.ID, at, d.AtError, deref(d.AppliedIndex), d.AppliedHash))
			continue
		}
		if d.Diverged != "" && ds[i].Diverged == "" {
			problems = append(problems, fmt.Sprintf("%s fenced itself: %s", d.ID, d.Diverged))
		}
		hashes[d.AtHash] = true
		parts = append(parts, fmt.Sprintf("%s %.12s", d.ID, d.AtHash))
	}
	if len(hashes) > 1 {
		problems = append([]string{fmt.Sprintf("the nodes' hashes of the entries applied through index %d differ: a replica applied another history: %s",
			at, strings.Join(parts, "; "))}, problems...)
	}
	caught := ""
	if at != hi {
		caught = fmt.Sprintf(" (the nodes had applied %d..%d after %s)", at, hi, bound)
	}
	if len(problems) > 0 {
		return fail("%s%s", strings.Join(problems, "; "), caught)
	}
	return Op{Process: finalProcess, Type: "ok", F: "applied-hash",
		Value: fmt.Sprintf("equal applied hashes at index %d: %s%s", at, strings.Join(parts, "; "), caught)}
}

func deref(p *uint64) any {
	if p == nil {
		return "?"
	}
	return *p
}

package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/lockcluster/lockcluster/internal/proccluster"
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

// appliedHashes compares the nodes' running hashes
// (proccluster.CompareAppliedHashes: it waits up to bound, asking every
// `every`, for the nodes to reach the same applied index, and reads each
// one's hash at the smallest applied_index among them) and returns the
// verdict as a final-phase entry of the history (F "applied-hash"; ok or
// fail, for the applied-hash checker). It fails when a node cannot be
// read, does not report the running hash, cannot give its hash at the
// index, reports that it fenced itself (diverged), or when the hashes
// differ.
func appliedHashes(ctx context.Context, c Cluster, bound, every time.Duration) Op {
	fail := func(format string, args ...any) Op {
		return Op{Process: finalProcess, Type: "fail", F: "applied-hash", Value: fmt.Sprintf(format, args...)}
	}
	addrs := make([]string, c.Size())
	for i := range addrs {
		addrs[i] = c.HTTPAddr(i)
	}
	h := proccluster.CompareAppliedHashes(ctx, addrs, "", bound, every)
	var errs []string
	for i, n := range h.Nodes {
		if n.Err != nil {
			errs = append(errs, fmt.Sprintf("node %d: %v", i, n.Err))
		}
	}
	if len(errs) > 0 {
		return fail("could not read every node's /debug/digest within %s: %s", bound, strings.Join(errs, "; "))
	}
	var problems []string
	for i, n := range h.Nodes {
		if !n.Reports() {
			return fail("%s (node %d) does not report applied_index in /debug/digest: a lockcluster without the running hash of applied entries", n.Last.ID, i)
		}
		if n.Last.Diverged != "" {
			problems = append(problems, fmt.Sprintf("%s fenced itself: %s", n.Last.ID, n.Last.Diverged))
		}
	}
	at := h.At
	if at == 0 {
		problems = append(problems, "a node has applied nothing")
	}
	for i, n := range h.Nodes {
		d := n.At
		switch {
		case at == 0:
		case n.AtErr != nil:
			problems = append(problems, fmt.Sprintf("node %d: %v", i, n.AtErr))
		case d.AtIndex != at:
			problems = append(problems, fmt.Sprintf("%s answered ?at=%d with at_index %d", d.ID, at, d.AtIndex))
		case d.AtHash == "":
			problems = append(problems, fmt.Sprintf("%s has no hash at index %d: %s (applied %d, applied_hash %q)",
				d.ID, at, d.AtError, *n.Last.AppliedIndex, n.Last.AppliedHash))
		case d.Diverged != "" && n.Last.Diverged == "":
			problems = append(problems, fmt.Sprintf("%s fenced itself: %s", d.ID, d.Diverged))
		}
	}
	if h.Differ() {
		problems = append([]string{fmt.Sprintf("the nodes' hashes of the entries applied through index %d differ: a replica applied another history: %s",
			at, h.Hashes("; "))}, problems...)
	}
	caught := ""
	if at != h.Highest {
		caught = fmt.Sprintf(" (the nodes had applied %d..%d after %s)", at, h.Highest, bound)
	}
	if len(problems) > 0 {
		return fail("%s%s", strings.Join(problems, "; "), caught)
	}
	return Op{Process: finalProcess, Type: "ok", F: "applied-hash",
		Value: fmt.Sprintf("equal applied hashes at index %d: %s%s", at, h.Hashes("; "), caught)}
}

package nodetest

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Every node keeps a chained hash of every log entry it applied (raftnode:
// AppliedHash, HashAt); nodes that applied the same entries have equal
// hashes at every index they share, and a replica that ever applied
// another entry never has them again, even once its state re-converged.
// A cluster compares them whenever a node stops and when its test ends
// (Start registers it), so every multi-node test checks that its replicas
// never diverged.

// plantEnv, set, makes a node of a divergencetest build apply something
// the others do not (raftnode/plant_on.go): a test that sets it wants a
// divergence, and its cluster does not compare hashes.
const plantEnv = "LOCKCLUSTER_TEST_DIVERGE"

// hashCatchUp bounds the wait, at the end of a test, for the running nodes
// to reach the same applied index before their hashes are compared at the
// smallest one (a node that stays behind, e.g. one that left the cluster,
// is compared where it is).
const hashCatchUp = 3 * time.Second

// appliedAt is a node's chain value at one index.
type appliedAt struct {
	id    string
	index uint64
	hash  [32]byte
}

func (a appliedAt) String() string {
	return fmt.Sprintf("%s %.12s", a.id, hex.EncodeToString(a.hash[:]))
}

// checkAppliedHashes fails the test if the running nodes' hashes of their
// applied entries differ at the smallest index they have all applied
// (after up to hashCatchUp for them to reach the same one), or differed
// when a node was stopped (Stop compares the nodes then), or a node fenced
// itself after a checkpoint mismatch. A node that does not know its chain
// or no longer remembers the index is skipped, and the test's log says
// so. Start runs it when the test ends, unless the test plants a
// divergence ($LOCKCLUSTER_TEST_DIVERGE).
func (c *Cluster) checkAppliedHashes() {
	c.t.Helper()
	c.compareRunning(hashCatchUp)
	if problem := c.hashReport(); problem != "" {
		c.t.Fatalf("%s", problem)
	}
}

// hashReport says what differed at the comparisons so far ("" if nothing).
func (c *Cluster) hashReport() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.diverged) == 0 {
		return ""
	}
	ps := slices.Compact(append([]string(nil), c.diverged...))
	return "the replicas diverged (running hashes of applied entries, raftnode): " + strings.Join(ps, "; ")
}

// compareRunning compares the running nodes' hashes at the smallest index
// they have all applied, after waiting up to wait for them to reach the
// same index, and keeps what differs in c.diverged: in every group of a
// cluster of several, each group's replicas among themselves.
func (c *Cluster) compareRunning(wait time.Duration) {
	groups := 1
	c.mu.Lock()
	for _, nd := range c.Nodes {
		if nd != nil {
			groups = nd.Groups()
		}
	}
	c.mu.Unlock()
	for g := 0; g < groups; g++ {
		c.compareGroup(g, groups, wait)
	}
}

// compareGroup is compareRunning for group g of groups.
func (c *Cluster) compareGroup(g, groups int, wait time.Duration) {
	var rs []hashSource
	var unknown, fenced []string
	deadline := time.Now().Add(wait)
	for {
		rs, unknown, fenced = rs[:0], unknown[:0], fenced[:0]
		c.mu.Lock()
		for _, nd := range c.Nodes {
			if nd == nil {
				continue
			}
			id, r := nd.ID(), nd.GroupRaft(g)
			if groups > 1 {
				id = fmt.Sprintf("%s (group %d)", id, g)
			}
			if err := r.Diverged(); err != nil {
				fenced = append(fenced, fmt.Sprintf("%s fenced itself: %v", id, err))
			}
			index, _, known := r.AppliedHash()
			if !known {
				unknown = append(unknown, id)
				continue
			}
			rs = append(rs, hashSource{id: id, index: index, at: r.HashAt})
		}
		c.mu.Unlock()
		// Wait for the running nodes to reach the same index, and to know
		// their chains (a young cluster's leader proposes the anchor that
		// starts them shortly after it is elected). One node: nothing to
		// compare, nothing to wait for.
		same := len(unknown) == 0 || len(rs)+len(unknown) < 2
		for _, r := range rs {
			same = same && r.index == rs[0].index
		}
		if same || !time.Now().Before(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, id := range unknown {
		if len(rs)+len(unknown) < 2 {
			break
		}
		c.t.Log(fmt.Sprintf("applied hashes: %s does not know its chain (not yet at the cluster's anchor entry, or restored from a snapshot without one): not compared", id))
	}
	diff, compared, notes := compareAt(rs)
	for _, n := range notes {
		c.t.Log("applied hashes: " + n)
	}
	if diff != "" {
		fenced = append(fenced, diff)
	}
	c.mu.Lock()
	c.diverged = append(c.diverged, fenced...)
	if compared > 1 {
		c.comparedAt = max(c.comparedAt, compared)
	}
	c.mu.Unlock()
}

// hashSource is one node's running hash: the last index it applied, and
// its hash at an index it remembers.
type hashSource struct {
	id    string
	index uint64
	at    func(uint64) (hash [32]byte, ok bool, why string)
}

// compareAt compares the sources' hashes at the smallest index they have
// all applied; it returns what differs ("" if nothing), how many sources
// it compared, and notes on the sources it could not compare.
func compareAt(rs []hashSource) (diff string, compared int, notes []string) {
	if len(rs) < 2 {
		return "", 0, nil
	}
	common := rs[0].index
	for _, r := range rs {
		common = min(common, r.index)
	}
	if common == 0 {
		return "", 0, nil
	}
	var vals []appliedAt
	for _, r := range rs {
		if h, ok, why := r.at(common); ok {
			vals = append(vals, appliedAt{id: r.id, index: common, hash: h})
		} else {
			notes = append(notes, fmt.Sprintf("%s (applied %d) has no hash at index %d: %s: not compared", r.id, r.index, common, why))
		}
	}
	for _, v := range vals {
		if v.hash != vals[0].hash {
			parts := make([]string, len(vals))
			for i, v := range vals {
				parts[i] = v.String()
			}
			return fmt.Sprintf("at index %d: %s", common, strings.Join(parts, ", ")), len(vals), notes
		}
	}
	return "", len(vals), notes
}

package raftnode

import (
	"errors"
	"fmt"
)

// storageDamage is a corruption or a loss found in this node's own
// persistent stores: a log entry whose checksum does not match, a log that
// ends before entries its files show were committed, a stable store whose
// term or vote cannot be trusted, a snapshot that does not restore.
//
// A damaged node may have told a leader it stored entries it no longer
// has, or voted in a term it no longer remembers. Until it is repaired from
// its peers (fence.go) it neither votes, nor stands for election, nor
// serves clients: the cluster may be unavailable, never wrong.
type storageDamage struct {
	Store  string // "log", "stable", "snapshot"
	Path   string // the file or directory that is damaged
	Index  uint64 // the first log index that cannot be trusted; 0 when the damage is not about an index
	Reason string // what was found, in words
}

func (d *storageDamage) Error() string {
	at := ""
	if d.Index > 0 {
		at = fmt.Sprintf(" from index %d", d.Index)
	}
	what := map[string]string{"log": "raft log", "stable": "term and vote store", "snapshot": "snapshot"}[d.Store]
	if what == "" {
		what = d.Store
	}
	return fmt.Sprintf("this node's %s is damaged%s (%s: %s); it serves no clients, votes in no election and stands for none until it is repaired from the leader",
		what, at, d.Path, d.Reason)
}

// ErrDamaged matches every *storageDamage.
var ErrDamaged = errors.New("storage damaged")

func (d *storageDamage) Is(target error) bool { return target == ErrDamaged }

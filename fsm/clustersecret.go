package fsm

import "fmt"

// The cluster secret proves that a call to a node's API comes from another
// node of the same cluster: Cluster.Touch, by which a follower forwards its
// clients' heartbeats to the leader, and the metadata that marks a call as
// forwarded (internal/server/member.go). It is drawn once, by the first
// leader that finds none in the state, and replicated like everything
// else: a node that joins gets it from the log or the leader's snapshot.
//
//   - SetClusterSecret is NodeOnly: a leader proposes it for itself, never
//     for a client.
//   - The first one applied wins: a later one changes nothing. Two leaders
//     that each proposed one (the first deposed before its entry
//     committed, say) cannot leave two secrets in the cluster, and a leader
//     may propose its own secret again so that a member whose state lacks
//     it (see below) gets it, without changing anyone else's.
//   - Its entries are always flagged ignore-if-unknown: a node of an older
//     version, during a rolling upgrade, applies them as no-ops instead of
//     stopping. Such a node can compact the entry into a snapshot without
//     the secret; once upgraded it restores that snapshot and lacks the
//     secret, and the leader proposes it again when such a node's calls
//     arrive without it.
//   - Raft's snapshots carry it (snapshot version 3); versions 1 and 2
//     restore without one, and the next leader draws one. A backup
//     (Snap.EncodeBackup, the SaveSnapshot RPC) leaves it out: whoever may
//     read a backup is not thereby a member, and a cluster restored from a
//     backup draws a secret of its own.

// SetClusterSecret sets the cluster secret, unless the state has one.
type SetClusterSecret struct {
	Secret string // the secret's bytes, random
}

func (SetClusterSecret) Type() EntryType { return typeClusterSecret }

// String and GoString leave the secret out of whatever prints the
// command or an entry that holds it.
func (c SetClusterSecret) String() string {
	return fmt.Sprintf("SetClusterSecret{%d bytes}", len(c.Secret))
}

func (c SetClusterSecret) GoString() string { return "fsm." + c.String() }

// Bounds on a cluster secret's length, in bytes (a node draws 32).
const (
	minClusterSecret = 16
	maxClusterSecret = 256
)

func (a *applier) setClusterSecret(c *SetClusterSecret) Result {
	if n := len(c.Secret); n < minClusterSecret || n > maxClusterSecret {
		return Result{Err: errorf(CodeInvalid, "a cluster secret has %d to %d bytes, not %d", minClusterSecret, maxClusterSecret, n)}
	}
	if a.st.clusterSecret == "" {
		a.st.clusterSecret = c.Secret
	}
	return Result{Status: statusOK}
}

// ClusterSecret is the cluster secret as this replica applied it ("" when
// it has none).
func (m *Machine) ClusterSecret() string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.clusterSecret
}

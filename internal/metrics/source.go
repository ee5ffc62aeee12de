package metrics

import "github.com/lockcluster/lockcluster/fsm"

// State is what the metrics read of the node's lock state: a
// *fsm.Machine, or on a node of several Raft groups the union of its
// groups' machines (internal/node), whose namespaces and session ids are
// disjoint, so that every per-namespace series covers every group.
type State interface {
	Stats() fsm.Stats
	Session(id uint64) (fsm.SessionInfo, bool)
	Sessions() []fsm.SessionInfo
	SessionRequests(id uint64) (reqs []fsm.RequestState, eventSeq uint64, ok bool)
	SessionsIn(ns string) int64
	NamespaceStats() []fsm.NamespaceStat
	// LastIndex is lockcluster_applied_index: group 0's raw index.
	LastIndex() uint64
}

var _ State = (*fsm.Machine)(nil)

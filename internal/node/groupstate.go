package node

import (
	"sync/atomic"

	"github.com/lockcluster/lockcluster/fsm"
)

// groupState is what the metrics read of a node of several groups
// (metrics.State): the union of the groups' machines. A session is its
// id's group's (top 16 bits), a namespace its slot's group's (the static
// spread); counts are sums, and the applied index is group 0's. Until the
// groups are built it reads group 0 alone.
type groupState struct {
	zero   *fsm.Machine
	groups atomic.Pointer[[]*fsm.Machine]
}

func (s *groupState) all() []*fsm.Machine {
	if p := s.groups.Load(); p != nil {
		return *p
	}
	return []*fsm.Machine{s.zero}
}

func (s *groupState) ofSession(id uint64) *fsm.Machine {
	ms := s.all()
	if g := int(id >> 48); g < len(ms) {
		return ms[g]
	}
	return s.zero
}

func (s *groupState) Stats() fsm.Stats {
	var out fsm.Stats
	for _, m := range s.all() {
		st := m.Stats()
		out.Namespaces += st.Namespaces
		out.Sessions += st.Sessions
		out.Held += st.Held
		out.Pending += st.Pending
	}
	out.LastIndex = s.zero.LastIndex()
	return out
}

func (s *groupState) Session(id uint64) (fsm.SessionInfo, bool) { return s.ofSession(id).Session(id) }

func (s *groupState) Sessions() []fsm.SessionInfo {
	var out []fsm.SessionInfo
	for _, m := range s.all() {
		out = append(out, m.Sessions()...)
	}
	return out
}

func (s *groupState) SessionRequests(id uint64) ([]fsm.RequestState, uint64, bool) {
	return s.ofSession(id).SessionRequests(id)
}

func (s *groupState) SessionsIn(ns string) int64 {
	ms := s.all()
	return ms[SpreadGroup(ns, len(ms))].SessionsIn(ns)
}

func (s *groupState) NamespaceStats() []fsm.NamespaceStat {
	var out []fsm.NamespaceStat
	for _, m := range s.all() {
		out = append(out, m.NamespaceStats()...)
	}
	return out
}

func (s *groupState) LastIndex() uint64 { return s.zero.LastIndex() }

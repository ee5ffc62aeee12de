package web

import (
	"time"

	"github.com/lockcluster/lockcluster/fsm"
)

// state is the JSON of /api/state: this node's view, read from its own
// lock manager without asking the leader (Linearizable is always false).
type state struct {
	Node         string      `json:"node"`
	RaftState    string      `json:"raftState"` // Leader, Follower, Candidate, Shutdown
	Leader       string      `json:"leader"`    // the leader's id, "" when none is known
	AppliedIndex uint64      `json:"appliedIndex"`
	Linearizable bool        `json:"linearizable"`
	Now          time.Time   `json:"now"`
	Members      []member    `json:"members"`
	Namespaces   []namespace `json:"namespaces"`
}

// member merges raft's configuration with the member directory's addresses.
type member struct {
	ID       string `json:"id"`
	Suffrage string `json:"suffrage,omitempty"` // Voter, Nonvoter; "" when only in the directory
	Leader   bool   `json:"leader"`
	Self     bool   `json:"self"`
	RaftAddr string `json:"raftAddr,omitempty"`
	GRPCAddr string `json:"grpcAddr,omitempty"`
	HTTPAddr string `json:"httpAddr,omitempty"`
	// Health is what the leader sees of the member (Options.Health); nil
	// when no leader answered.
	Health *Health `json:"health,omitempty"`
}

// Health is what the leader's probes saw of a member: whether its API
// answered the last one, how long ago it last did (-1: never, in this
// leader's term), how many committed entries it had not applied, and why
// it serves no clients, if it said so (its Status unfit: a diverged
// history, damaged stores, a disk that takes no writes, a lag behind the
// leader; "" while it is fit).
type Health struct {
	Reachable           bool    `json:"reachable"`
	SinceContactSeconds float64 `json:"sinceContactSeconds"`
	Lag                 uint64  `json:"lag"`
	Unfit               string  `json:"unfit,omitempty"`
}

// namespace is one namespace's sessions and locks. Held and Pending list
// at most Options.maxLocks each (Truncated says so); the counts are
// complete. A scoped request appears once per name, as in a query.
type namespace struct {
	Name      string `json:"name"`
	Sessions  int    `json:"sessions"`
	HeldCount int    `json:"heldCount"`
	// PendingCount counts requests; Pending lists (request, name) pairs.
	PendingCount int    `json:"pendingCount"`
	Held         []lock `json:"held"`
	Pending      []lock `json:"pending"`
	Truncated    bool   `json:"truncated"`
}

// lock is one line of a namespace's held or pending list. Times are the
// leader's clock when the entry was proposed; Age is Now minus AcquiredAt
// for a held lock, minus RequestedAt for a pending one.
type lock struct {
	Name        string     `json:"name"`
	Mode        string     `json:"mode"`
	ClientID    string     `json:"clientId"`
	Label       string     `json:"label"`
	Session     uint64     `json:"session"`
	RequestID   uint64     `json:"requestId"`
	Token       uint64     `json:"token,omitempty"`
	AcquiredAt  *time.Time `json:"acquiredAt,omitempty"`
	RequestedAt time.Time  `json:"requestedAt"`
	AgeSeconds  float64    `json:"ageSeconds"`
}

// snapshot reads the state the page shows.
func snapshot(o Options) state {
	now := time.Now()
	if o.now != nil {
		now = o.now()
	}
	max := o.maxLocks
	if max <= 0 {
		max = 200
	}
	st := state{Node: o.NodeID, Now: now.UTC(), Members: members(o), Namespaces: []namespace{}}
	if o.Raft != nil {
		st.RaftState = o.Raft.State()
		st.Leader, _ = o.Raft.Leader()
	}
	if o.Machine == nil {
		return st
	}
	st.AppliedIndex = o.Machine.LastIndex()
	for _, ns := range o.Machine.NamespaceStats() {
		q := o.Machine.Query(ns.Name)
		n := namespace{Name: ns.Name, Sessions: ns.Sessions, HeldCount: ns.Held, PendingCount: ns.Pending}
		n.Held, n.Truncated = locks(q.Held, max, now, true)
		var cut bool
		n.Pending, cut = locks(q.Pending, max, now, false)
		n.Truncated = n.Truncated || cut
		st.Namespaces = append(st.Namespaces, n)
	}
	return st
}

func locks(in []fsm.LockInfo, max int, now time.Time, held bool) ([]lock, bool) {
	cut := len(in) > max
	if cut {
		in = in[:max]
	}
	out := make([]lock, len(in))
	for i, l := range in {
		out[i] = lock{Name: l.Name, Mode: l.Mode.String(), ClientID: l.ClientID, Label: l.Label, Session: l.Session,
			RequestID: l.RequestID, RequestedAt: time.Unix(0, l.RequestedAt).UTC()}
		since := out[i].RequestedAt
		if held {
			at := time.Unix(0, l.AcquiredAt).UTC()
			out[i].Token, out[i].AcquiredAt, since = l.Token, &at, at
		}
		if age := now.Sub(since); age > 0 {
			out[i].AgeSeconds = age.Seconds()
		}
	}
	return out, cut
}

// members lists raft's configuration, in its order, with the directory's
// addresses; members only in the directory (joining or leaving) follow.
func members(o Options) []member {
	out := []member{}
	dir := map[string]fsm.Member{}
	if o.Machine != nil {
		for _, m := range o.Machine.Members() {
			dir[m.ID] = m
		}
	}
	seen := map[string]bool{}
	if o.Raft != nil {
		if ms, err := o.Raft.Members(); err == nil {
			for _, m := range ms {
				d := dir[m.ID]
				out = append(out, member{ID: m.ID, Suffrage: m.Suffrage, Leader: m.Leader, Self: m.ID == o.NodeID,
					RaftAddr: m.Addr, GRPCAddr: d.GRPCAddr, HTTPAddr: d.HTTPAddr})
				seen[m.ID] = true
			}
		}
	}
	if o.Health != nil {
		health := o.Health()
		for i := range out {
			if h, ok := health[out[i].ID]; ok {
				out[i].Health = &h
			}
		}
	}
	if o.Machine != nil {
		for _, d := range o.Machine.Members() {
			if !seen[d.ID] {
				out = append(out, member{ID: d.ID, Self: d.ID == o.NodeID, RaftAddr: d.RaftAddr, GRPCAddr: d.GRPCAddr, HTTPAddr: d.HTTPAddr})
			}
		}
	}
	return out
}

package raftnode

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// What the leader's heartbeats say of each follower. hashicorp/raft keeps
// a follower's last contact inside its replication state, but it reports
// every failed heartbeat with that time (raft.FailedHeartbeatObservation,
// replication.go, heartbeat) and the first success after failures
// (ResumedHeartbeatObservation) to observers. The node keeps the latest
// report per follower while it leads, so that a member whose API nobody
// can probe (it died before it recorded its API address) still shows as
// unreachable, with how long, instead of unknown.

// PeerContact is what this node, as leader, last heard of a follower's
// heartbeats.
type PeerContact struct {
	// Failing: the latest heartbeat to it failed, and none has succeeded
	// since.
	Failing bool
	// LastContact is its last successful heartbeat as raft reported it
	// with the failure (the start of replication in this term if none
	// succeeded).
	LastContact time.Time
}

type peerWatch struct {
	mu   sync.Mutex
	seen map[string]PeerContact
}

func (w *peerWatch) set(id string, c PeerContact) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen == nil {
		w.seen = map[string]PeerContact{}
	}
	w.seen[id] = c
}

// reset forgets every report: a change of leadership starts replication
// afresh.
func (w *peerWatch) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(w.seen)
}

// PeerContact reports what this node, while leader, last heard of the
// heartbeats to member id; ok is false when it has no report (a follower
// whose heartbeats never failed in this term, or this node does not lead).
func (n *Node) PeerContact(id string) (c PeerContact, ok bool) {
	if !n.IsLeader() {
		return PeerContact{}, false
	}
	n.peers.mu.Lock()
	defer n.peers.mu.Unlock()
	c, ok = n.peers.seen[id]
	return c, ok
}

// watchPeers records raft's heartbeat observations until raft stops.
func (n *Node) watchPeers() {
	defer n.wg.Done()
	ch := make(chan raft.Observation, 64)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation:
			return true
		}
		return false
	})
	n.raft.RegisterObserver(obs)
	defer n.raft.DeregisterObserver(obs)
	for {
		select {
		case o := <-ch:
			switch d := o.Data.(type) {
			case raft.FailedHeartbeatObservation:
				n.peers.set(string(d.PeerID), PeerContact{Failing: true, LastContact: d.LastContact})
			case raft.ResumedHeartbeatObservation:
				n.peers.set(string(d.PeerID), PeerContact{LastContact: time.Now()})
			}
		case <-n.stopped:
			return
		}
	}
}

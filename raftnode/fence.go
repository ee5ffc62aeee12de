package raftnode

import (
	"context"
	"errors"
	"sync"
)

// The fences: what keeps this node from serving clients, from standing for
// election and from voting. Each has its own cause and its own end:
//
//	fence       serves  campaigns  votes  ends
//	diverged    no      no         yes    never (rebuild the node; checkpoint.go)
//	damaged     no      no         no     once repaired from a leader (repair.go)
//	storage     no      no         yes    once the disk takes writes again
//	behind      no      yes        yes    once it applies what the leader committed
//
// A diverged replica's log is the cluster's (only its state machine is
// not), so it may vote. A damaged one may have told a leader it stored
// entries it has lost, or forgotten a vote: it must not vote until a
// leader has given it the committed log back. A node whose disk is full
// cannot store a leader's entries: as leader it would step down at once,
// over and over. A node that does not apply what the leader commits
// serves stale state and starves its clients' grants.
//
// Unfit says why the node must not serve; Fenced gives a context that
// ends when it next becomes unfit, so that open streams end then.
type fenceKind int

const (
	fenceDiverged fenceKind = iota
	fenceDamaged
	fenceStorage
	fenceBehind
	fenceKinds
)

func (k fenceKind) String() string {
	return [...]string{"diverged", "damaged", "storage", "behind"}[k]
}

type fences struct {
	mu     sync.Mutex
	why    [fenceKinds]error
	ctx    context.Context // done when the node next becomes unfit
	cancel context.CancelCauseFunc
}

func newFences() *fences {
	f := &fences{}
	f.ctx, f.cancel = context.WithCancelCause(context.Background())
	return f
}

// set raises fence k with cause err; it reports whether k was down before.
// A node that was fit ends its current episode: every stream holding
// Fenced's context ends.
func (f *fences) set(k fenceKind, err error) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	wasUp := f.why[k] != nil
	wasFit := f.firstLocked() == nil
	f.why[k] = err
	if wasFit {
		f.cancel(err)
		f.ctx, f.cancel = context.WithCancelCause(context.Background())
	}
	return !wasUp
}

// clear lowers fence k; it reports whether it was up.
func (f *fences) clear(k fenceKind) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	wasUp := f.why[k] != nil
	f.why[k] = nil
	return wasUp
}

func (f *fences) get(k fenceKind) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.why[k]
}

func (f *fences) first() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.firstLocked()
}

func (f *fences) firstLocked() error {
	for _, err := range f.why {
		if err != nil {
			return err
		}
	}
	return nil
}

// episode returns the context that ends when the node next becomes unfit
// (already ended if it is unfit now).
func (f *fences) episode() context.Context {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.firstLocked(); err != nil {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(err)
		return ctx
	}
	return f.ctx
}

// mayCampaign: the node may send RequestVote and RequestPreVote.
func (f *fences) mayCampaign() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.why[fenceDiverged] == nil && f.why[fenceDamaged] == nil && f.why[fenceStorage] == nil
}

// mayVote: the node may grant votes (and pre-votes).
func (f *fences) mayVote() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.why[fenceDamaged] == nil
}

// Unfit returns nil while this node may serve clients, and otherwise why
// not: a *divergedError (errors.Is ErrDiverged), a *storageDamage
// (ErrDamaged), a storage failure (ErrStorage) or a lag behind the leader
// (ErrBehind).
func (n *Node) Unfit() error { return n.fences.first() }

// Fenced returns a context that ends, with the reason as its cause, when
// this node next becomes unfit to serve; it has already ended while the
// node is unfit. Take it before checking Unfit, so that a fence raised in
// between is not missed.
func (n *Node) Fenced() context.Context { return n.fences.episode() }

// Damaged returns the damage found in this node's stores until it is
// repaired (nil otherwise).
func (n *Node) Damaged() error { return n.fences.get(fenceDamaged) }

// FenceReasons reports which fences are up, by name ("diverged",
// "damaged", "storage", "behind"), for metrics.
func (n *Node) FenceReasons() map[string]bool {
	n.fences.mu.Lock()
	defer n.fences.mu.Unlock()
	m := make(map[string]bool, fenceKinds)
	for k := range fenceKinds {
		m[k.String()] = n.fences.why[k] != nil
	}
	return m
}

// ErrStorage matches the error of a node whose disk does not take writes.
var ErrStorage = errors.New("storage failing")

// ErrBehind matches the error of a node that does not apply what the
// leader committed.
var ErrBehind = errors.New("replica behind")

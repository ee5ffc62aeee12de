package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/logsafe"
	"github.com/lockcluster/lockcluster/internal/rpcerr"
	"github.com/lockcluster/lockcluster/raftnode"
)

// membership owns the cluster's membership as this node serves it: join
// and leave (raft's configuration, changed through the Replica's Join and
// Leave), the member directory (fsm.SetMember records of where each member
// serves raft, gRPC and HTTP), this node's own record, and the rule by
// which a node learns that it was removed (IsMember, RemovedFrom; the
// watch itself is internal/node's). The Join, Leave and Members handlers
// of cluster.go are thin wrappers over it.
//
// The configuration and the directory are changed by separate log entries:
// a join adds the voter, then records it; a leave removes the server, then
// its record. The second step can fail after the first committed (the
// leader lost, its outcome unknown, the caller's deadline). Hence:
//
//   - A record whose id is not in the configuration is stale: a join
//     records an id only once the configuration holds it. A leave of such
//     an id removes the record and succeeds, so a leave can be retried from
//     any point; an id in neither is still an error naming the members (as
//     etcd's member remove of an unknown id: a typo must not look like
//     success).
//   - The leader removes stale records (reconcile) when it gains leadership
//     and after every leave: one left behind by a leave that failed and was
//     not retried, or by a record-only join that raced a leave on an
//     earlier leader, does not stay.
//   - On one leader, joins, leaves and reconciles run one at a time (mu): a
//     record-only join cannot re-add the record of a member that a leave
//     is removing.
type membership struct {
	s        *Server
	mu       sync.Mutex // held by join, leave, reconcile and promote
	learners learners   // learner.go
}

// maxReconcile bounds the stale records one reconcile removes (the rest
// wait for the next one); reconcileTimeout bounds its time.
const (
	maxReconcile     = 64
	reconcileTimeout = 10 * time.Second
)

func (ms *membership) replica() (Replica, error) {
	r := ms.s.replica()
	if r == nil {
		return nil, fmt.Errorf("%w: node is starting", rpcerr.ErrNotReady)
	}
	return r, nil
}

// directory is the member directory as this node has applied it, by id.
func (ms *membership) directory() []fsm.Member { return ms.s.dir.Members() }

// record is member id's directory record, if it has one.
func (ms *membership) record(id string) (fsm.Member, bool) {
	for _, m := range ms.directory() {
		if m.ID == id {
			return m, true
		}
	}
	return fsm.Member{}, false
}

// grpcAddr is member id's API address ("" when it has recorded none).
func (ms *membership) grpcAddr(id string) string {
	m, _ := ms.record(id)
	return m.GRPCAddr
}

// list is r's configuration with the directory's addresses and, when this
// node leads, what its probes saw of each member (probe.go).
func (ms *membership) list(r Replica) (*pb.MembersResponse, error) {
	conf, err := r.Members()
	if err != nil {
		return nil, err
	}
	dir := map[string]fsm.Member{}
	for _, m := range ms.directory() {
		dir[m.ID] = m
	}
	leading := r.IsLeader()
	out := &pb.MembersResponse{}
	for _, m := range conf {
		d := dir[m.ID]
		pm := &pb.Member{Id: m.ID, RaftAddr: m.Addr, GrpcAddr: d.GRPCAddr, HttpAddr: d.HTTPAddr, Suffrage: m.Suffrage, Leader: m.Leader}
		if leading {
			ms.s.describe(pm)
		}
		ms.describeLearner(pm) // learner.go
		out.Members = append(out.Members, pm)
	}
	return out, nil
}

// join adds the voter (with learner, the learner: learner.go) and records
// it in the member directory, on the leader; with record_only, it records
// a member of the configuration only.
func (ms *membership) join(ctx context.Context, req *pb.JoinRequest) (*pb.JoinResponse, error) {
	r, err := ms.replica()
	if err != nil {
		return nil, err
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if req.RecordOnly {
		if !r.IsLeader() {
			return nil, ms.s.notLeader()
		}
		conf, err := r.Members()
		if err != nil {
			return nil, err
		}
		if !inConfiguration(conf, req.Id) {
			return nil, fmt.Errorf("%w: %s is not a member (removed by leave?): not recording it", raftnode.ErrNotMember, req.Id)
		}
	} else if req.Learner {
		if err := r.AddLearner(ctx, req.Id, req.RaftAddr); err != nil {
			return nil, err
		}
	} else if err := r.Join(ctx, req.Id, req.RaftAddr); err != nil {
		return nil, err
	}
	m := fsm.Member{ID: req.Id, RaftAddr: req.RaftAddr, GRPCAddr: req.GrpcAddr, HTTPAddr: req.HttpAddr}
	if err := ms.setMember(ctx, m, false); err != nil {
		return nil, err
	}
	ms.s.probeNow() // its protocol level, at once (level.go)
	resp := &pb.JoinResponse{}
	if conf, err := r.Members(); err == nil {
		resp.Voters = voters(conf) // learners do not count
		i := slices.IndexFunc(conf, func(m raftnode.Member) bool { return m.ID == req.Id })
		resp.Learner = i >= 0 && isLearner(conf[i].Suffrage)
	}
	// A no-promote mark stays until the learner is promoted or removed: a
	// learner's own join (serve --join) does not clear it.
	if resp.Learner && req.NoPromote {
		ms.learners.setManual(req.Id, true)
	}
	resp.Warning = evenVoters(resp.Voters)
	ms.s.log.Info("member joined", "id", logsafe.String(req.Id), "raft", logsafe.String(req.RaftAddr), "grpc", logsafe.String(req.GrpcAddr), "voters", resp.Voters, "learner", resp.Learner)
	if resp.Warning != "" {
		ms.s.log.Warn(resp.Warning)
	}
	return resp, nil
}

// evenVoters warns of an even number of voters, as etcd's docs do: n even
// tolerates as many failures as n-1, with a larger quorum to reach.
func evenVoters(n uint32) string {
	if n == 0 || n%2 != 0 {
		return ""
	}
	return fmt.Sprintf("the cluster now has %d voters: an even count tolerates no more failures than %d voters (%d) and needs a majority of %d; add or remove one voter", n, n-1, (n-1)/2, n/2+1)
}

// leave removes server id from the configuration and its record from the
// directory, on the leader (a *raftnode.NotLeaderError elsewhere, for the
// handler to forward: the leader decides, on its view, whether id is a
// member). An id that is no longer in the committed configuration but
// still has a record (an earlier leave whose second step failed) loses its
// record, and the leave succeeds; an id in neither is ErrNotMember.
func (ms *membership) leave(ctx context.Context, id string) error {
	r, err := ms.replica()
	if err != nil {
		return err
	}
	if !r.IsLeader() && !isForwarded(ctx) {
		if leader, _ := r.Leader(); leader != "" && leader != ms.s.cfg.Self.ID {
			return ms.s.notLeader()
		}
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	switch err := r.Leave(ctx, id); {
	case err == nil:
	case errors.Is(err, raftnode.ErrNotMember):
		// Not in the committed configuration. On the leader, judge the
		// record on a directory that has every committed entry applied
		// (elsewhere, on this node's: a record found is removed through
		// the leader, by forwarding).
		_ = r.ReadBarrier(ctx)
		if _, ok := ms.record(id); !ok {
			return err
		}
		ms.s.log.Info("leave: the member is no longer in the configuration; removing its record", "id", logsafe.String(id))
	default:
		return err
	}
	if err := ms.setMember(ctx, fsm.Member{ID: id}, true); err != nil {
		return err
	}
	ms.learners.forget(id)
	ms.s.log.Info("member removed", "id", logsafe.String(id))
	ms.reconcileLocked(ctx)
	return nil
}

// reconcile removes the directory's stale records (see membership).
func (ms *membership) reconcile(ctx context.Context) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	ms.reconcileLocked(ctx)
}

// reconcileLocked removes, on the leader, at most maxReconcile directory
// records whose id is not in the configuration, in any suffrage. It reads
// the configuration before it proposes a removal, so a removal that
// commits comes after that configuration in the log, which is then
// committed too: a configuration not yet committed (an AddVoter under
// way) keeps its ids' records, and a removal judged by one that never
// commits never commits either. Failures are logged: the next leave or
// leadership gain reconciles again.
func (ms *membership) reconcileLocked(ctx context.Context) {
	r := ms.s.replica()
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, reconcileTimeout)
	defer cancel()
	// Confirms this node leads, and brings its directory up to date.
	if err := r.ReadBarrier(ctx); err != nil {
		ms.s.log.Debug("member directory: not reconciled", "error", err)
		return
	}
	conf, err := r.Members()
	if err != nil {
		ms.s.log.Debug("member directory: not reconciled", "error", err)
		return
	}
	var stale []string
	for _, m := range ms.directory() {
		if !inConfiguration(conf, m.ID) {
			stale = append(stale, m.ID)
		}
	}
	if len(stale) > maxReconcile {
		ms.s.log.Info("member directory: more stale records than one reconcile removes; the rest wait for the next", "stale", len(stale), "removing", maxReconcile)
		stale = stale[:maxReconcile]
	}
	for _, id := range stale {
		if err := ms.setMember(ctx, fsm.Member{ID: id}, true); err != nil {
			if ctx.Err() == nil {
				ms.s.log.Warn("member directory: removing a stale record failed", "id", id, "error", err)
			}
			return
		}
		ms.s.log.Info("member directory: removed stale record", "id", id)
	}
}

// lead runs once this node leads (after the re-arm, leader.go): it makes
// sure the directory has this node's record, then reconciles.
func (ms *membership) lead(ctx context.Context) {
	self := ms.s.cfg.Self
	if !ms.registered() {
		if _, err := ms.join(ctx, &pb.JoinRequest{Id: self.ID, RaftAddr: self.RaftAddr, GrpcAddr: self.GRPCAddr, HttpAddr: self.HTTPAddr}); err != nil && ctx.Err() == nil {
			ms.s.log.Warn("recording this node in the member directory failed", "error", err)
		}
	}
	ms.reconcile(ctx)
}

// registered reports whether the directory holds this node's record as
// configured.
func (ms *membership) registered() bool {
	m, ok := ms.record(ms.s.cfg.Self.ID)
	return ok && m == ms.s.cfg.Self
}

// register makes sure the member directory holds this node's record, so
// that other nodes can forward to it when it leads. A follower asks the
// leader to record it (Join, record_only); the leader records itself in
// lead.
func (ms *membership) register(ctx context.Context) {
	self := ms.s.cfg.Self
	// Record only: a node removed by leave must not add itself back.
	req := &pb.JoinRequest{Id: self.ID, RaftAddr: self.RaftAddr, GrpcAddr: self.GRPCAddr, HttpAddr: self.HTTPAddr, RecordOnly: true}
	wait := 10 * time.Millisecond // the leader records itself first
	for !ms.registered() {
		if r := ms.s.replica(); r != nil && !r.IsLeader() {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := ms.s.Join(cctx, req)
			cancel()
			if err != nil && ctx.Err() == nil {
				ms.s.log.Debug("recording this node in the member directory: not yet", "error", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// setMember proposes a directory record (its removal, with remove).
func (ms *membership) setMember(ctx context.Context, m fsm.Member, remove bool) error {
	ap, _, err := ms.s.propose(ctx, &fsm.SetMember{Member: m, Remove: remove})
	if err != nil {
		return err
	}
	return ap.Result.Err
}

func inConfiguration(conf []raftnode.Member, id string) bool {
	return slices.ContainsFunc(conf, func(m raftnode.Member) bool { return m.ID == id })
}

// IsMember is the first half of the removed-node rule: whether node id is
// a member as its own replica sees it, in raft's configuration conf or in
// the member directory dir (a node removed at once may see only its
// record). Only a node that has been a member asks whether it was removed.
func IsMember(id string, conf []raftnode.Member, dir []fsm.Member) bool {
	return inConfiguration(conf, id) || slices.ContainsFunc(dir, func(m fsm.Member) bool { return m.ID == id })
}

// RemovedFrom is the second half: it reads a Members answer for node id.
// Only an answer from a leader other than id decides (decided is false
// otherwise); then it names that leader, and removed says whether its
// configuration leaves id out.
func RemovedFrom(resp *pb.MembersResponse, id string) (leader string, removed, decided bool) {
	listed := false
	for _, m := range resp.GetMembers() {
		if m.Leader {
			leader = m.Id
		}
		listed = listed || m.Id == id
	}
	if leader == "" || leader == id {
		return "", false, false
	}
	return leader, !listed, true
}

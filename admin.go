package lockcluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// Admin talks to a cluster's Cluster service: status, members, join,
// promote, leave. It opens no session.
type Admin struct {
	c *Client
}

// DialAdmin connects to the given endpoints for cluster operations.
func DialAdmin(endpoints []string, opts ...Option) (*Admin, error) {
	cfg := config{}
	for _, o := range opts {
		o(&cfg)
	}
	c := &Client{cfg: cfg}
	for _, e := range splitEndpoints(endpoints) {
		cc, err := grpc.NewClient(e, cfg.dialOptions()...)
		if err != nil {
			c.closeConns()
			return nil, fmt.Errorf("%w: endpoint %q: %v", ErrInvalid, e, err)
		}
		c.addrs, c.conns = append(c.addrs, e), append(c.conns, cc)
	}
	if len(c.conns) == 0 {
		return nil, fmt.Errorf("%w: no endpoint given (set --addr or LOCKCLUSTER_ADDR, e.g. 127.0.0.1:7700)", ErrInvalid)
	}
	return &Admin{c: c}, nil
}

// Close closes the connections.
func (a *Admin) Close() error { a.c.closeConns(); return nil }

// Member is one member of the cluster.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raftAddr"`
	GRPCAddr string `json:"grpcAddr"`
	HTTPAddr string `json:"httpAddr,omitempty"`
	Suffrage string `json:"suffrage"`
	// Role is "voter", or "learner" for a non-voter (joined as a learner:
	// it receives the log but does not vote, until it is promoted).
	Role   string `json:"role"`
	Leader bool   `json:"leader"`
	// NoPromote: a learner the leader promotes only by hand (Promote).
	NoPromote bool `json:"noPromote,omitempty"`
	// PromoteWithin, for a learner, is how many entries behind (Lag) it
	// may be to be promoted: the leader does so once it has stayed within
	// it for a few probes, unless NoPromote. 0 for a voter.
	PromoteWithin uint64 `json:"promoteWithin,omitempty"`
	// What the leader sees of the member, from probing its API every
	// second. Probed is false when the answer did not come from a leader or
	// the leader has not probed the member yet; the rest is unset then.
	Probed    bool `json:"probed"`
	Reachable bool `json:"reachable"`
	// LastContact is when the member last answered the leader (zero: never
	// in this leader's term), on this machine's clock.
	LastContact time.Time `json:"lastContact,omitzero"`
	// Lag is how many committed entries the member had not applied.
	Lag          uint64 `json:"lag"`
	AppliedIndex uint64 `json:"appliedIndex"`
	Version      string `json:"version,omitempty"`
	// Unfit, from the member's last answer, is why it serves no clients:
	// its applied history diverged, its stores are damaged, its disk takes
	// no writes, or it lags behind the leader. Empty while it is fit.
	Unfit string `json:"unfit,omitempty"`
	// Level is the member's protocol level, from its last answer (1 for a
	// member of a release before levels); 0 when the leader has not heard
	// it, or the answer did not come from a leader of a release with
	// levels. See the README's "Upgrading".
	Level uint32 `json:"level,omitempty"`
}

// Status is one node's view of the cluster.
type Status struct {
	NodeID       string `json:"nodeId"`
	Addr         string `json:"addr"`
	State        string `json:"state"`
	LeaderID     string `json:"leaderId"`
	LeaderAddr   string `json:"leaderAddr"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commitIndex"`
	AppliedIndex uint64 `json:"appliedIndex"`
	Sessions     uint64 `json:"sessions"`
	Held         uint64 `json:"held"`
	Pending      uint64 `json:"pending"`
	Namespaces   uint64 `json:"namespaces"`
	Version      string `json:"version"`
	// Unfit is why the node serves no clients (see Member.Unfit); it
	// answers Status regardless. Empty while it is fit.
	Unfit string `json:"unfit,omitempty"`
	// Level is the protocol level the node's build supports (1 for a node
	// of a release before levels, which does not say); ClusterLevel, on
	// the leader, is the cluster's: the lowest among the members (0 on a
	// follower).
	Level        uint32 `json:"level,omitempty"`
	ClusterLevel uint32 `json:"clusterLevel,omitempty"`
	// Groups, on a cluster of several Raft groups, is the node's replica
	// of each (group 0 first); the counts above are then their sums.
	// Empty with one group.
	Groups []GroupStatus `json:"groups,omitempty"`
	Err    string        `json:"error,omitempty"`
}

// GroupStatus is a node's replica of one Raft group.
type GroupStatus struct {
	Group        uint32 `json:"group"`
	State        string `json:"state"`
	LeaderID     string `json:"leaderId"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commitIndex"`
	AppliedIndex uint64 `json:"appliedIndex"`
	// Slots is how many of the 4,096 slots the replica's state says the
	// group serves: once they add up to 4,096, every namespace is served.
	Slots    uint32 `json:"slots"`
	Sessions uint64 `json:"sessions"`
	Held     uint64 `json:"held"`
	Pending  uint64 `json:"pending"`
	Unfit    string `json:"unfit,omitempty"`
}

// levelBeforeLevels is the protocol level of a node that reports none.
const levelBeforeLevels = 1

// Status asks every endpoint for its status; an unreachable one has Err.
func (a *Admin) Status(ctx context.Context) []Status {
	// All at once: one endpoint that does not answer must not use up the
	// others' time.
	out := make([]Status, len(a.c.conns))
	var wg sync.WaitGroup
	for i, cc := range a.c.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := pb.NewClusterClient(cc).Status(ctx, &pb.StatusRequest{})
			if err != nil {
				out[i] = Status{Addr: a.c.addrs[i], Err: fromStatus(err).Error()}
				return
			}
			out[i] = Status{NodeID: st.NodeId, Addr: a.c.addrs[i], State: st.State, LeaderID: st.LeaderId, LeaderAddr: st.LeaderAddr,
				Term: st.Term, CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex, Sessions: st.Sessions, Held: st.Held,
				Pending: st.Pending, Namespaces: st.Namespaces, Version: st.Version, Unfit: st.Unfit,
				Level: st.ProtocolLevel, ClusterLevel: st.ClusterLevel}
			if out[i].Level == 0 {
				out[i].Level = levelBeforeLevels
			}
			for _, g := range st.Groups {
				out[i].Groups = append(out[i].Groups, GroupStatus{Group: g.Group, State: g.State, LeaderID: g.LeaderId, Term: g.Term,
					CommitIndex: g.CommitIndex, AppliedIndex: g.AppliedIndex, Slots: g.Slots, Sessions: g.Sessions, Held: g.Held,
					Pending: g.Pending, Unfit: g.Unfit})
			}
		}()
	}
	wg.Wait()
	return out
}

// Members lists the cluster's members, as the first reachable endpoint
// sees them.
func (a *Admin) Members(ctx context.Context) ([]Member, error) {
	var resp *pb.MembersResponse
	err := a.cluster(ctx, func(ctx context.Context, cc pb.ClusterClient) error {
		var err error
		resp, err = cc.Members(ctx, &pb.MembersRequest{})
		return err
	})
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]Member, len(resp.Members))
	for i, m := range resp.Members {
		out[i] = Member{ID: m.Id, RaftAddr: m.RaftAddr, GRPCAddr: m.GrpcAddr, HTTPAddr: m.HttpAddr, Suffrage: m.Suffrage, Role: roleOf(m.Suffrage), Leader: m.Leader,
			NoPromote: m.NoPromote, PromoteWithin: m.PromoteWithin,
			Probed: m.Probed, Reachable: m.Reachable, Lag: m.Lag, AppliedIndex: m.AppliedIndex, Version: m.Version, Unfit: m.Unfit,
			Level: m.ProtocolLevel}
		if m.SinceContact != nil {
			out[i].LastContact = now.Add(-m.SinceContact.AsDuration())
		}
	}
	return out, nil
}

// roleOf is a member's role by its raft suffrage.
func roleOf(suffrage string) string {
	switch suffrage {
	case "Voter":
		return "voter"
	case "Nonvoter":
		return "learner"
	}
	return strings.ToLower(suffrage)
}

// JoinResult is what the leader said of a join.
type JoinResult struct {
	// Voters in the configuration after the join (learners do not count).
	Voters int `json:"voters"`
	// Learner: the node is a learner after the join.
	Learner bool `json:"learner"`
	// Warning, when set, is for the operator: an even number of voters.
	Warning string `json:"warning,omitempty"`
}

// JoinOptions say how a node joins.
type JoinOptions struct {
	// Learner adds the node as a learner (raft's non-voter): it receives
	// the log but neither votes nor counts toward a commit, so a node with
	// a long log to catch up does not slow the cluster's commits. The
	// leader promotes it to voter once it has caught up. A node that is a
	// voter already stays one; a leader of a release before learners adds
	// a voter (JoinResult.Learner says which it is).
	Learner bool
	// NoPromote, with Learner: only Promote makes it a voter.
	NoPromote bool
}

// Join adds a node (its id, raft address and API addresses) as a voter.
func (a *Admin) Join(ctx context.Context, m Member) (JoinResult, error) {
	return a.JoinWith(ctx, m, JoinOptions{})
}

// JoinWith adds a node as Join does, as a learner if o says so.
func (a *Admin) JoinWith(ctx context.Context, m Member, o JoinOptions) (JoinResult, error) {
	if o.NoPromote && !o.Learner {
		return JoinResult{}, fmt.Errorf("%w: NoPromote is for a learner", ErrInvalid)
	}
	var out JoinResult
	err := a.cluster(ctx, func(ctx context.Context, cc pb.ClusterClient) error {
		resp, err := cc.Join(ctx, &pb.JoinRequest{Id: m.ID, RaftAddr: m.RaftAddr, GrpcAddr: m.GRPCAddr, HttpAddr: m.HTTPAddr,
			Learner: o.Learner, NoPromote: o.NoPromote})
		if err == nil {
			out = JoinResult{Voters: int(resp.Voters), Learner: resp.Learner, Warning: resp.Warning}
		}
		return err
	})
	return out, err
}

// PromoteOptions say how to promote a learner.
type PromoteOptions struct {
	// Force promotes the learner however far behind the leader it is.
	Force bool
}

// PromoteResult is what the leader said of a promotion.
type PromoteResult struct {
	// Voters in the configuration after the promotion.
	Voters int `json:"voters"`
	// AlreadyVoter: the member was a voter; nothing changed.
	AlreadyVoter bool `json:"alreadyVoter,omitempty"`
	// Warning, when set, is for the operator: an even number of voters.
	Warning string `json:"warning,omitempty"`
}

// Promote makes learner id a voter. The leader refuses (an error naming
// how far behind it is) a learner it does not see caught up: more than
// Member.PromoteWithin entries behind, not answering, or unfit, unless
// o.Force.
func (a *Admin) Promote(ctx context.Context, id string, o PromoteOptions) (PromoteResult, error) {
	var out PromoteResult
	err := a.cluster(ctx, func(ctx context.Context, cc pb.ClusterClient) error {
		resp, err := cc.Promote(ctx, &pb.PromoteRequest{Id: id, Force: o.Force})
		if err == nil {
			out = PromoteResult{Voters: int(resp.Voters), AlreadyVoter: resp.AlreadyVoter, Warning: resp.Warning}
		}
		return err
	})
	return out, err
}

// Leave removes a member (also one that is dead).
func (a *Admin) Leave(ctx context.Context, id string) error {
	return a.cluster(ctx, func(ctx context.Context, cc pb.ClusterClient) error {
		_, err := cc.Leave(ctx, &pb.LeaveRequest{Id: id})
		return err
	})
}

// Health reports whether the first endpoint serves (it has a leader).
func (a *Admin) Health(ctx context.Context) error {
	resp, err := healthpb.NewHealthClient(a.c.conns[0]).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return fromStatus(err)
	}
	if resp.Status != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("%w: %s is %s", ErrUnavailable, a.c.addrs[0], resp.Status)
	}
	return nil
}

func (a *Admin) cluster(ctx context.Context, f func(context.Context, pb.ClusterClient) error) error {
	return a.c.call(ctx, func(ctx context.Context, _ pb.LocksClient) error {
		cc, _ := a.c.conn()
		return f(ctx, pb.NewClusterClient(cc))
	})
}

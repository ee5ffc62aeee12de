package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/auth"
	"github.com/lockcluster/lockcluster/raftnode"
)

// Writes and linearizable reads run on the leader. A node that is not the
// leader forwards the call, once, to the leader's API as the member
// directory gives it; a forwarded call that lands on a node that is not the
// leader either fails with NOT_LEADER, and the client retries.

const forwardedKey = "lockcluster-forwarded"

// rpcForwardTimeout bounds one client call forwarded to the leader (a
// write, a linearizable read, the start of a snapshot): long enough for a
// write to reach a quorum's disks, short enough that a caller whose leader
// vanished retries elsewhere well before its own deadline. The heartbeats
// a follower forwards in batches have their own, shorter bound
// (session's touchForwardTimeout, 2 s): a renewal writes nothing to the
// log, and its acknowledgement is of use only within the client's TTL/3.
const rpcForwardTimeout = 5 * time.Second

func isForwarded(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(forwardedKey)) > 0
}

// forwardContext marks the call as forwarded and authenticates it: with the
// node's own token when auth is on (mutual TLS authenticates by the node's
// certificate), else with whatever the caller sent; and proves it comes
// from a member with the cluster secret, once this node has it (member.go).
func (s *Server) forwardContext(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	out := metadata.Pairs(forwardedKey, s.cfg.Self.ID)
	if secret := s.dir.ClusterSecret(); secret != "" {
		out.Set(auth.MemberSecretKey, auth.MemberSecretValue(secret))
	}
	if s.adminCaller(ctx) {
		out.Set(adminKey, "1") // the leader trusts it from a node only
	}
	if token := s.nodeToken(); token != "" { // reload.go: it may change
		// This node checked the caller's rights; the next trusts the node.
		out.Set("authorization", "Bearer "+token)
	} else if v := md.Get("authorization"); len(v) > 0 {
		out.Set("authorization", v...)
	}
	return metadata.NewOutgoingContext(ctx, out)
}

// leaderConn returns a connection to the leader's API, given the error that
// said this node is not the leader.
func (s *Server) leaderConn(ctx context.Context, notLeader error) (*grpc.ClientConn, error) {
	var nl *raftnode.NotLeaderError
	if isForwarded(ctx) || !errors.As(notLeader, &nl) || nl.LeaderID == "" || nl.LeaderID == s.cfg.Self.ID {
		return nil, notLeader
	}
	for _, m := range s.dir.Members() {
		if m.ID == nl.LeaderID && m.GRPCAddr != "" {
			return s.peers.get(m.GRPCAddr)
		}
	}
	return nil, notLeader
}

// forward runs call against the leader when err says this node is not it,
// and returns err otherwise.
func forward[T any](s *Server, ctx context.Context, err error, call func(context.Context, *grpc.ClientConn) (T, error)) (T, error) {
	var zero T
	if !errors.Is(err, raftnode.ErrNotLeader) {
		return zero, toStatus(err)
	}
	cc, cerr := s.leaderConn(ctx, err)
	if cerr != nil {
		return zero, toStatus(cerr)
	}
	// A forwarded call gets a bounded part of the caller's time: if the
	// leader it names is gone, the caller retries (with the same request
	// id) rather than waiting out its whole deadline here.
	fctx, cancel := context.WithTimeout(ctx, rpcForwardTimeout)
	defer cancel()
	r, ferr := call(s.forwardContext(fctx), cc)
	if ferr != nil && ctx.Err() == nil && fctx.Err() != nil {
		return zero, withInfo(codes.Unavailable, pb.ErrorReason_OUTCOME_UNKNOWN, "OutcomeUnknown",
			"the leader did not answer the forwarded call in time (retry with the same request id)", nil)
	}
	return r, ferr
}

// peers caches client connections to other nodes' APIs.
type peers struct {
	opts  []grpc.DialOption
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func newPeers(opts []grpc.DialOption) *peers {
	// A peer that vanished (a killed container) does not refuse connections:
	// give up on a connect after a second, and find a dead connection by
	// keepalive, so forwarding moves on to the new leader quickly.
	opts = append([]grpc.DialOption{
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: time.Second,
			Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 5 * time.Second, Timeout: 2 * time.Second, PermitWithoutStream: true}),
		// Fixed windows: no bandwidth-delay ping per forwarded call.
		grpc.WithStaticStreamWindowSize(1 << 20), grpc.WithStaticConnWindowSize(8 << 20),
	}, opts...)
	return &peers{opts: opts, conns: map[string]*grpc.ClientConn{}}
}

func (p *peers) get(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cc := p.conns[addr]; cc != nil {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, p.opts...)
	if err != nil {
		return nil, err
	}
	p.conns[addr] = cc
	return cc, nil
}

func (p *peers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, cc := range p.conns {
		cc.Close()
		delete(p.conns, a)
	}
}

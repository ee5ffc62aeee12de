package server

import (
	"context"
	"errors"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/lockcluster/lockcluster/raftnode"
)

// Writes and linearizable reads run on the leader. A node that is not the
// leader forwards the call, once, to the leader's API as the member
// directory gives it; a forwarded call that lands on a node that is not the
// leader either fails with NOT_LEADER, and the client retries.

const forwardedKey = "lockcluster-forwarded"

func isForwarded(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(forwardedKey)) > 0
}

// forwardContext marks the call as forwarded and authenticates it: with the
// node's own token when auth is on (mutual TLS authenticates by the node's
// certificate), else with whatever the caller sent.
func (s *Server) forwardContext(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	out := metadata.Pairs(forwardedKey, s.cfg.Self.ID)
	if s.cfg.NodeToken != "" {
		// This node checked the caller's rights; the next trusts the node.
		out.Set("authorization", "Bearer "+s.cfg.NodeToken)
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
	for _, m := range s.m.Members() {
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
	return call(s.forwardContext(ctx), cc)
}

// peers caches client connections to other nodes' APIs.
type peers struct {
	opts  []grpc.DialOption
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func newPeers(opts []grpc.DialOption) *peers {
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

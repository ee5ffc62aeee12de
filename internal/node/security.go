package node

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/lockcluster/lockcluster/internal/auth"
)

// secure sets up TLS and auth: the gRPC server's credentials and
// interceptors, the credentials this node uses to reach the others (API
// forwarding and raft), and the HTTP port's TLS.
func (n *Node) secure() error {
	cfg := &n.cfg
	authz, err := auth.New(cfg.Auth)
	if err != nil {
		return err
	}
	n.authz = authz
	if authz.Enabled() {
		n.serverOptions = append(n.serverOptions, grpc.ChainUnaryInterceptor(authz.Unary()), grpc.ChainStreamInterceptor(authz.Stream()))
		cfg.Server.NodeToken = authz.NodeToken()
	} else {
		n.log.Warn("no authentication is configured: any client can use any namespace (see the README's production section)")
	}
	// Clients and peers ping every few seconds to find dead connections (a
	// paused node); allow it. The server pings idle clients too, to drop
	// half-open connections.
	// A connection with no call or stream for ConnIdleTimeout is closed
	// (GOAWAY: its client reconnects when it calls again), and one that
	// has not finished its handshake in connHandshakeTimeout: idle
	// connections cost the node memory and descriptors (connlimit.go).
	n.serverOptions = append(n.serverOptions,
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 15 * time.Second, Timeout: keepaliveTimeout,
			MaxConnectionIdle: orDefault(cfg.ConnIdleTimeout, DefaultConnIdleTimeout)}),
		grpc.ConnectionTimeout(connHandshakeTimeout),
		// Fixed windows: no bandwidth-delay pings after every small
		// request (see the client's dial options).
		grpc.StaticStreamWindowSize(1<<20), grpc.StaticConnWindowSize(8<<20))
	if cfg.MaxMessageBytes > 0 {
		n.serverOptions = append(n.serverOptions, grpc.MaxRecvMsgSize(cfg.MaxMessageBytes))
	}
	if !cfg.TLS.enabled() {
		if cfg.Server.DialOptions == nil {
			cfg.Server.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		}
		if authz.Enabled() {
			n.log.Warn("auth without TLS: bearer tokens cross the network in the clear")
		}
		return nil
	}
	// Every configuration reads the files in force at each handshake: a
	// reload changes them for new connections (tls.go, reload.go).
	st, err := loadTLS(cfg.TLS)
	if err != nil {
		return err
	}
	n.tls = newTLSStore(st, n.log.Named("tls"))
	n.serverOptions = append(n.serverOptions, grpc.Creds(credentials.NewTLS(n.tls.serverConfig())))
	if cfg.Server.DialOptions == nil {
		cfg.Server.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(&peerCreds{store: n.tls})}
	}
	n.httpTLS = n.tls.httpConfig()
	// Raft peers must present a certificate of the cluster's CA.
	sl, err := newStreamLayer(cfg.RaftAddr, cfg.AdvertiseRaft, n.tls.raftConfig(), n.tls.peerConfig)
	if err != nil {
		return err
	}
	cfg.Raft.StreamLayer = sl
	return nil
}

// adminCall reports whether a gRPC call carries an admin credential, for
// the audit log; nil when auth is off.
func (n *Node) adminCall() func(context.Context) bool {
	if !n.authz.Enabled() {
		return nil
	}
	return func(ctx context.Context) bool { return n.authz.Admin(auth.CallerOf(ctx)) }
}

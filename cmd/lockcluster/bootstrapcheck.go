package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/raftnode"
)

// --bootstrap-check: a node that comes back on an empty data directory (a
// machine or a Kubernetes pod that lost its volume) must join the cluster
// it was in, not bootstrap a second one from --bootstrap. Given the client
// API addresses of the --bootstrap voters, serve decides before it starts:
//
//   - a data directory used before (its raft/ holds anything): resume from
//     it (or wait to be filled in by a leader); never bootstrap;
//   - an empty one, not the first voter of --bootstrap: bootstrap nothing;
//     join through the first voter (the leader fills this node in: it is in
//     the first configuration);
//   - an empty one, the first voter: ask every other voter's Status; join
//     through the first that holds raft state; bootstrap only once every
//     one has answered with none (a new cluster: every volume is empty);
//     while any does not answer, wait and ask again.
//
// Only the first voter ever bootstraps, and only when no voter has state,
// so a lost volume never starts a second cluster, whichever voter lost it.

// bootstrapCheckEvery is how often the first voter asks again.
const bootstrapCheckEvery = time.Second

// errStopped: ctx ended (a signal) while serve waited to decide; it exits 0.
var errStopped = errors.New("stopped before starting")

// checkBootstrap returns what node.Start gets instead of peers and
// --join: the voters to bootstrap (nil: none) and the address to join
// through ("" none). It waits until it can decide, or ctx ends.
func (c *serveConfig) checkBootstrap(ctx context.Context, logger hclog.Logger, peers []raftnode.Peer) ([]raftnode.Peer, string, error) {
	if c.bootstrap == "" || c.join != "" {
		return nil, "", &exitError{code: exitUsage, msg: "--bootstrap-check needs --bootstrap (the same voters) and no --join"}
	}
	apis, err := parsePeers(c.bootstrapCheck)
	if err != nil {
		return nil, "", &exitError{code: exitUsage, msg: strings.Replace(err.Error(), "--bootstrap", "--bootstrap-check", 1)}
	}
	api := map[string]string{}
	for _, a := range apis {
		if !containsPeer(peers, a.ID) {
			return nil, "", &exitError{code: exitUsage, msg: fmt.Sprintf("--bootstrap-check names %s, which is not a --bootstrap voter", a.ID)}
		}
		api[a.ID] = a.Addr
	}
	for _, p := range peers {
		if _, ok := api[p.ID]; !ok && p.ID != c.id {
			return nil, "", &exitError{code: exitUsage, msg: fmt.Sprintf("--bootstrap-check has no client API address for the voter %s", p.ID)}
		}
	}
	raftDir := filepath.Join(c.dataDir, "raft")
	entries, err := os.ReadDir(raftDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, "", fmt.Errorf("bootstrap-check: %w", err)
	}
	if len(entries) > 0 {
		logger.Info("bootstrap-check: the data directory was used before: not bootstrapping", "dir", raftDir)
		return nil, "", nil
	}
	first := peers[0].ID
	if c.id != first {
		logger.Info("bootstrap-check: empty data directory: joining through the first voter, which alone may bootstrap", "first", first, "join", api[first])
		return nil, api[first], nil
	}
	dial, err := c.peerDialOptions()
	if err != nil {
		return nil, "", err
	}
	var others []raftnode.Peer
	for _, p := range peers {
		if p.ID != c.id {
			others = append(others, raftnode.Peer{ID: p.ID, Addr: api[p.ID]})
		}
	}
	var lastLog time.Time
	for {
		states := askStatus(ctx, others, dial)
		var silent []string
		for _, s := range states {
			switch {
			case s.err != nil:
				silent = append(silent, fmt.Sprintf("%s at %s: %v", s.ID, s.Addr, s.err))
			case s.lastIndex > 0:
				logger.Info("bootstrap-check: empty data directory, but a voter holds raft state: joining the cluster through it, not bootstrapping",
					"voter", s.ID, "join", s.Addr, "its_last_index", s.lastIndex)
				return nil, s.Addr, nil
			}
		}
		if len(silent) == 0 {
			logger.Info("bootstrap-check: every other voter answered with an empty data directory: bootstrapping a new cluster", "voters", len(peers))
			return peers, "", nil
		}
		if time.Since(lastLog) >= 10*time.Second {
			logger.Warn("bootstrap-check: empty data directory: waiting for every other voter to answer before bootstrapping", "not_answering", strings.Join(silent, "; "))
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, "", errStopped
		case <-time.After(bootstrapCheckEvery):
		}
	}
}

func containsPeer(peers []raftnode.Peer, id string) bool {
	for _, p := range peers {
		if p.ID == id {
			return true
		}
	}
	return false
}

type voterState struct {
	raftnode.Peer // ID and client API address
	lastIndex     uint64
	err           error
}

// askStatus asks each peer's Status at once, each for up to 2 s.
func askStatus(ctx context.Context, peers []raftnode.Peer, dial []grpc.DialOption) []voterState {
	out := make([]voterState, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = voterState{Peer: p}
			cc, err := grpc.NewClient(p.Addr, dial...)
			if err != nil {
				out[i].err = err
				return
			}
			defer cc.Close()
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			st, err := pb.NewClusterClient(cc).Status(cctx, &pb.StatusRequest{})
			if err != nil {
				out[i].err = err
				return
			}
			out[i].lastIndex = st.LastIndex
		}()
	}
	wg.Wait()
	return out
}

// peerDialOptions are the credentials this node calls the others with:
// its certificate and the cluster's CA when TLS is on, the first admin
// token when auth is.
func (c *serveConfig) peerDialOptions() ([]grpc.DialOption, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if c.tls.CA != "" || c.tls.Cert != "" || c.tls.Key != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.tls.CA != "" {
			b, err := os.ReadFile(c.tls.CA)
			if err != nil {
				return nil, fmt.Errorf("bootstrap-check: TLS CA file: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(b) {
				return nil, fmt.Errorf("bootstrap-check: TLS CA file %s holds no PEM certificate", c.tls.CA)
			}
		}
		if c.tls.Cert != "" && c.tls.Key != "" {
			pair, err := tls.LoadX509KeyPair(c.tls.Cert, c.tls.Key)
			if err != nil {
				return nil, fmt.Errorf("bootstrap-check: TLS certificate %s with key %s: %w", c.tls.Cert, c.tls.Key, err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		opts = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}
	}
	if len(c.auth.AdminTokens) > 0 {
		token := c.auth.AdminTokens[0]
		opts = append(opts, grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, o ...grpc.CallOption) error {
			return invoker(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), method, req, reply, cc, o...)
		}))
	}
	return opts, nil
}

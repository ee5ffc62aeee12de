package node

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/credentials"
)

// TLSFiles names the PEM files of a node's TLS, and how its client API
// treats client certificates. (A client loads its own with the root
// package's lockcluster.TLSFiles.)
type TLSFiles struct {
	CA   string // the CA that signs every node's and client's certificate
	Cert string // this node's certificate
	Key  string // its private key
	// ClientAuth, on the client API: "none", "verify-if-given" or
	// "require" (mutual TLS). Default "verify-if-given" when CA is set.
	ClientAuth string
}

// enabled reports whether any file is named.
func (f TLSFiles) enabled() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// The files are read at start and again on a reload (Node.Reload, the
// watch in reload.go), never per connection: a tlsState is one reading of
// them, and the tlsStore holds the one in force. Every TLS configuration
// the node uses asks the store at each handshake (GetConfigForClient,
// GetCertificate, a configuration built per dial), so a new state serves
// every new connection while the connections already open keep theirs:
//
//   - the client API (server): the certificate, ClientCAs the CA,
//     ClientAuth as asked;
//   - raft's listener (raftServer): the same, a peer certificate required;
//   - the HTTP port: the certificate;
//   - what the node dials (peer: API forwarding, joins, raft): the
//     certificate as its client certificate, trusting the CA, or the
//     system's roots when none is named.

// tlsState is one reading of the files.
type tlsState struct {
	files  TLSFiles
	sum    [32]byte // of the files' contents: the watch compares it
	cert   *tls.Certificate
	leaf   *x509.Certificate
	pool   *x509.CertPool // nil: no CA file
	server *tls.Config    // the client API's, per handshake
	raft   *tls.Config    // raft's listener's, per handshake
}

// tlsContents are the files' bytes, read once: what is parsed is what was
// summed.
type tlsContents struct {
	cert, key, ca []byte
	sum           [32]byte
}

// readTLS reads the files named in f.
func readTLS(f TLSFiles) (tlsContents, error) {
	switch {
	case f.Cert == "" && f.Key == "":
		return tlsContents{}, fmt.Errorf("tls: a node needs a certificate and key (--tls-cert, --tls-key)")
	case f.Key == "":
		return tlsContents{}, fmt.Errorf("tls: certificate %s is given without its key (--tls-key)", f.Cert)
	case f.Cert == "":
		return tlsContents{}, fmt.Errorf("tls: key %s is given without its certificate (--tls-cert)", f.Key)
	}
	var c tlsContents
	var err error
	if c.cert, err = os.ReadFile(f.Cert); err != nil {
		return c, fmt.Errorf("tls: certificate file: %w", err)
	}
	if c.key, err = os.ReadFile(f.Key); err != nil {
		return c, fmt.Errorf("tls: key file: %w", err)
	}
	if f.CA != "" {
		if c.ca, err = os.ReadFile(f.CA); err != nil {
			return c, fmt.Errorf("tls: CA file: %w", err)
		}
	}
	h := sha256.New()
	for _, b := range [][]byte{c.cert, c.key, c.ca} {
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	copy(c.sum[:], h.Sum(nil))
	return c, nil
}

// parseTLS makes a state of the contents of f's files. A certificate and
// a key that do not match (a rotation half done) are an error.
func parseTLS(f TLSFiles, c tlsContents) (*tlsState, error) {
	pair, err := tls.X509KeyPair(c.cert, c.key)
	if err != nil {
		return nil, fmt.Errorf("tls: certificate %s with key %s: %w", f.Cert, f.Key, err)
	}
	st := &tlsState{files: f, sum: c.sum, cert: &pair, leaf: pair.Leaf}
	if st.leaf == nil {
		if st.leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tls: certificate %s: %w", f.Cert, err)
		}
	}
	if f.CA != "" {
		st.pool = x509.NewCertPool()
		if !st.pool.AppendCertsFromPEM(c.ca) {
			return nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", f.CA)
		}
	}
	certs := []tls.Certificate{pair}
	st.server = &tls.Config{Certificates: certs, ClientCAs: st.pool, MinVersion: tls.VersionTLS12}
	mode := f.ClientAuth
	if mode == "" {
		mode = "none"
		if st.pool != nil {
			mode = "verify-if-given"
		}
	}
	switch mode {
	case "none":
		st.server.ClientAuth = tls.NoClientCert
	case "verify-if-given":
		st.server.ClientAuth = tls.VerifyClientCertIfGiven
	case "require":
		st.server.ClientAuth = tls.RequireAndVerifyClientCert
	default:
		return nil, fmt.Errorf("tls: client auth %q is not none, verify-if-given or require", f.ClientAuth)
	}
	if st.server.ClientAuth != tls.NoClientCert && st.pool == nil {
		return nil, fmt.Errorf("tls: client auth %q needs a CA file (--tls-ca)", mode)
	}
	// Raft peers must present a certificate of the cluster's CA.
	if st.pool == nil {
		return nil, fmt.Errorf("tls: the raft links need the cluster's CA (--tls-ca) to verify peers")
	}
	st.raft = &tls.Config{Certificates: certs, ClientCAs: st.pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	return st, nil
}

// loadTLS reads and parses f's files.
func loadTLS(f TLSFiles) (*tlsState, error) {
	c, err := readTLS(f)
	if err != nil {
		return nil, err
	}
	return parseTLS(f, c)
}

// describe is what the log says of a state's certificate.
func (st *tlsState) describe() []any {
	return []any{"cert", st.files.Cert, "subject", st.leaf.Subject.CommonName, "serial", hex.EncodeToString(st.leaf.SerialNumber.Bytes()),
		"not_after", st.leaf.NotAfter.UTC().Format("2006-01-02T15:04:05Z"), "ca", st.files.CA}
}

// tlsStore holds the state in force.
type tlsStore struct {
	cur atomic.Pointer[tlsState]
	log hclog.Logger

	mu     sync.Mutex // one change at a time: a reload, a watch tick
	failed string     // what the watch last failed to load (logged once)
}

func newTLSStore(st *tlsState, log hclog.Logger) *tlsStore {
	s := &tlsStore{log: log}
	s.cur.Store(st)
	return s
}

// state is the state in force.
func (s *tlsStore) state() *tlsState { return s.cur.Load() }

// swap puts st in force for every new connection, and logs it when it
// differs from the state it replaces; why says what changed it.
func (s *tlsStore) swap(st *tlsState, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.swapLocked(st, why)
}

func (s *tlsStore) swapLocked(st *tlsState, why string) {
	old := s.cur.Swap(st)
	s.failed = ""
	if old.sum != st.sum || old.files != st.files {
		s.log.Info("TLS reloaded: new connections use these files", append([]any{"by", why}, st.describe()...)...)
	}
}

// poll reads the files in force and puts them in force again if their
// contents changed (the watch: cert-manager and certbot rewrite them in
// place). Contents that do not load (a certificate written, its key not
// yet) are not applied: the next poll tries again, and the log says so
// once per such contents.
func (s *tlsStore) poll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.cur.Load()
	c, err := readTLS(cur.files)
	if err == nil && c.sum == cur.sum {
		return
	}
	var st *tlsState
	if err == nil {
		st, err = parseTLS(cur.files, c)
	}
	if err != nil {
		key := err.Error()
		if c.cert != nil && c.key != nil {
			key = hex.EncodeToString(c.sum[:]) // the same contents: logged once
		}
		if key != s.failed {
			s.failed = key
			s.log.Warn("the TLS files changed but do not load (a rotation under way?): the certificate in force stays; trying again at each check", "error", err)
		}
		return
	}
	s.swapLocked(st, "watch")
}

// serverConfig is the client API's configuration.
func (s *tlsStore) serverConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return s.state().server, nil
	}}
}

// raftConfig is raft's listener's configuration: a peer certificate of the
// CA is required.
func (s *tlsStore) raftConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return s.state().raft, nil
	}}
}

// httpConfig is the HTTP port's configuration: the certificate, no client
// certificate asked for.
func (s *tlsStore) httpConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		return s.state().cert, nil
	}}
}

// peerConfig is a new configuration to dial another node with: this
// node's certificate as its client certificate, trusting the CA (or the
// system's roots when none is named).
func (s *tlsStore) peerConfig() *tls.Config {
	st := s.state()
	return &tls.Config{Certificates: []tls.Certificate{*st.cert}, RootCAs: st.pool, MinVersion: tls.VersionTLS12}
}

// peerCreds are the gRPC transport credentials this node dials the others
// with: each handshake uses the files in force (peerConfig).
type peerCreds struct {
	store      *tlsStore
	serverName string // OverrideServerName's
}

func (c *peerCreds) tls() credentials.TransportCredentials {
	cfg := c.store.peerConfig()
	cfg.ServerName = c.serverName
	return credentials.NewTLS(cfg)
}

func (c *peerCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.tls().ClientHandshake(ctx, authority, conn)
}

func (c *peerCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("node: peer credentials only dial")
}

func (c *peerCreds) Info() credentials.ProtocolInfo { return c.tls().Info() }

func (c *peerCreds) Clone() credentials.TransportCredentials {
	cp := *c
	return &cp
}

func (c *peerCreds) OverrideServerName(name string) error {
	c.serverName = name
	return nil
}

var _ credentials.TransportCredentials = (*peerCreds)(nil)

package node

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
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

// load reads the files once and returns the node's two sides: server
// serves the client API (ClientCAs the CA, ClientAuth as asked); peer
// dials the other nodes (API forwarding, raft) trusting the CA, or the
// system's roots when none is named, and presents this node's
// certificate.
func (f TLSFiles) load() (server, peer *tls.Config, err error) {
	switch {
	case f.Cert == "" && f.Key == "":
		return nil, nil, fmt.Errorf("tls: a node needs a certificate and key (--tls-cert, --tls-key)")
	case f.Key == "":
		return nil, nil, fmt.Errorf("tls: certificate %s is given without its key (--tls-key)", f.Cert)
	case f.Cert == "":
		return nil, nil, fmt.Errorf("tls: key %s is given without its certificate (--tls-cert)", f.Key)
	}
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: certificate %s with key %s: %w", f.Cert, f.Key, err)
	}
	var pool *x509.CertPool
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, nil, fmt.Errorf("tls: CA file: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", f.CA)
		}
	}
	certs := []tls.Certificate{pair}
	server = &tls.Config{Certificates: certs, ClientCAs: pool, MinVersion: tls.VersionTLS12}
	mode := f.ClientAuth
	if mode == "" {
		mode = "none"
		if pool != nil {
			mode = "verify-if-given"
		}
	}
	switch mode {
	case "none":
		server.ClientAuth = tls.NoClientCert
	case "verify-if-given":
		server.ClientAuth = tls.VerifyClientCertIfGiven
	case "require":
		server.ClientAuth = tls.RequireAndVerifyClientCert
	default:
		return nil, nil, fmt.Errorf("tls: client auth %q is not none, verify-if-given or require", f.ClientAuth)
	}
	if server.ClientAuth != tls.NoClientCert && pool == nil {
		return nil, nil, fmt.Errorf("tls: client auth %q needs a CA file (--tls-ca)", mode)
	}
	peer = &tls.Config{Certificates: certs, RootCAs: pool, MinVersion: tls.VersionTLS12}
	return server, peer, nil
}

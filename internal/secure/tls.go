// Package secure holds lockcluster's transport security: TLS
// configurations for the client API, the raft links and the HTTP port, a
// TLS stream layer for raft, and the creation of a private CA and its
// certificates for trying TLS out (the standard library only).
//
// This package is implementation, not API: it makes no compatibility
// promise, and it exports only what other lockcluster packages use. The
// stable API is the client (package lockcluster) and the wire contract
// (api/lockclusterv1).
package secure

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Files names the PEM files of a TLS setup.
type Files struct {
	CA   string // the CA that signs every node's and client's certificate
	Cert string // this side's certificate
	Key  string // its private key
	// ClientAuth, for servers: "none", "verify-if-given" or "require"
	// (mutual TLS). Default "verify-if-given" when CA is set.
	ClientAuth string
}

// Enabled reports whether any file is named.
func (f Files) Enabled() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

func (f Files) pool() (*x509.CertPool, error) {
	if f.CA == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("tls: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", f.CA)
	}
	return pool, nil
}

func (f Files) keyPair() ([]tls.Certificate, error) {
	if f.Cert == "" && f.Key == "" {
		return nil, nil
	}
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("tls: a certificate needs both its cert and key files")
	}
	c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("tls: %s / %s: %w", f.Cert, f.Key, err)
	}
	return []tls.Certificate{c}, nil
}

// Server returns the TLS configuration of a server.
func (f Files) Server() (*tls.Config, error) {
	certs, err := f.keyPair()
	if err != nil {
		return nil, err
	}
	if len(certs) == 0 {
		return nil, errors.New("tls: a server needs a certificate and key (--tls-cert, --tls-key)")
	}
	pool, err := f.pool()
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{Certificates: certs, ClientCAs: pool, MinVersion: tls.VersionTLS12}
	mode := f.ClientAuth
	if mode == "" {
		mode = "none"
		if pool != nil {
			mode = "verify-if-given"
		}
	}
	switch mode {
	case "none":
		cfg.ClientAuth = tls.NoClientCert
	case "verify-if-given":
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	case "require":
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	default:
		return nil, fmt.Errorf("tls: client auth %q is not none, verify-if-given or require", f.ClientAuth)
	}
	if cfg.ClientAuth != tls.NoClientCert && pool == nil {
		return nil, fmt.Errorf("tls: client auth %q needs a CA file (--tls-ca)", mode)
	}
	return cfg, nil
}

// Client returns the TLS configuration of a client: it trusts the CA (or
// the system roots when none is named) and presents its certificate, if
// any, for mutual TLS.
func (f Files) Client() (*tls.Config, error) {
	certs, err := f.keyPair()
	if err != nil {
		return nil, err
	}
	pool, err := f.pool()
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: certs, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// Identities are the names a verified peer certificate proves: its subject
// common name and its DNS, URI and e-mail subject alternative names.
func Identities(state *tls.ConnectionState) []string {
	if state == nil || len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return nil
	}
	c := state.VerifiedChains[0][0]
	out := []string{}
	if c.Subject.CommonName != "" {
		out = append(out, c.Subject.CommonName)
	}
	out = append(out, c.DNSNames...)
	out = append(out, c.EmailAddresses...)
	for _, u := range c.URIs {
		out = append(out, u.String())
	}
	return out
}

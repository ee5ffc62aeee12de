// Package pki creates a private certificate authority and certificates
// signed by it, for trying lockcluster with TLS and mutual TLS
// ('lockcluster tls', 'lockcluster dev --tls'). It uses the standard
// library only. For production, use your own PKI.
//
// This package is implementation, not API: it makes no compatibility
// promise. The stable API is the client (package lockcluster) and the
// wire contract (api/lockclusterv1).
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// CreateCA writes a new private CA, dir/ca.crt and dir/ca.key, valid for
// the given duration. It refuses to overwrite an existing CA.
func CreateCA(dir, name string, validity time.Duration) error {
	crt, key := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if _, err := os.Stat(key); err == nil {
		return fmt.Errorf("tls: %s exists: not overwriting a CA", key)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"lockcluster"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		return err
	}
	return writePair(crt, key, der, priv)
}

// CertRequest describes a certificate to create.
type CertRequest struct {
	CADir    string   // where ca.crt and ca.key are
	OutDir   string   // where NAME.crt and NAME.key go
	Name     string   // the subject common name, and the files' name
	Hosts    []string // DNS names, IP addresses or URIs the certificate is valid for
	Validity time.Duration
}

// CreateCert writes a certificate signed by the CA, usable both as a server
// certificate (for Hosts) and as a client certificate (its identity is
// Name, and Hosts).
func CreateCert(r CertRequest) error {
	if r.Name == "" {
		return errors.New("tls: a certificate needs a name")
	}
	ca, caKey, err := loadCA(r.CADir)
	if err != nil {
		return err
	}
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: r.Name, Organization: []string{"lockcluster"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(r.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range r.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if u, err := url.Parse(h); err == nil && u.Scheme != "" {
			tmpl.URIs = append(tmpl.URIs, u)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &priv.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(r.OutDir, 0o755); err != nil {
		return err
	}
	return writePair(filepath.Join(r.OutDir, r.Name+".crt"), filepath.Join(r.OutDir, r.Name+".key"), der, priv)
}

func loadCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	crtPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, nil, fmt.Errorf("tls: reading the CA: %w (create one with 'lockcluster tls ca create')", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, nil, fmt.Errorf("tls: reading the CA key: %w", err)
	}
	cb, _ := pem.Decode(crtPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("tls: the CA files in %s are not PEM", dir)
	}
	crt, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return crt, key, nil
}

func writePair(crtPath, keyPath string, der []byte, priv *ecdsa.PrivateKey) error {
	kb, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		return err
	}
	if err := os.WriteFile(crtPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

package lockcluster

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// TLSFiles names the PEM files a client connects over TLS with; Config
// loads them for WithTLS:
//
//	cfg, err := lockcluster.TLSFiles{CA: "ca.crt", Cert: "app.crt", Key: "app.key"}.Config()
//	if err != nil {
//		return err
//	}
//	c, err := lockcluster.Dial(ctx, endpoints, lockcluster.WithTLS(cfg))
type TLSFiles struct {
	// CA is the certificate (or bundle) of the CA that signed the nodes'
	// certificates; empty, the system's roots are trusted.
	CA string
	// Cert and Key are the client's certificate and its private key, both
	// or neither: with them the client presents its certificate (mutual
	// TLS), whose identity the cluster's auth may grant namespaces to.
	Cert, Key string
}

// Config reads the files and returns the TLS configuration of a client
// that trusts CA and presents Cert. Its errors name the file at fault.
func (f TLSFiles) Config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("lockcluster: TLS CA file: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("lockcluster: TLS CA file %s holds no PEM certificate", f.CA)
		}
	}
	switch {
	case f.Cert == "" && f.Key == "":
		return cfg, nil
	case f.Key == "":
		return nil, fmt.Errorf("lockcluster: TLS certificate file %s is given without its key file", f.Cert)
	case f.Cert == "":
		return nil, fmt.Errorf("lockcluster: TLS key file %s is given without its certificate file", f.Key)
	}
	certPEM, err := os.ReadFile(f.Cert)
	if err != nil {
		return nil, fmt.Errorf("lockcluster: TLS certificate file: %w", err)
	}
	keyPEM, err := os.ReadFile(f.Key)
	if err != nil {
		return nil, fmt.Errorf("lockcluster: TLS key file: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("lockcluster: TLS certificate file %s with key file %s: %w", f.Cert, f.Key, err)
	}
	cfg.Certificates = []tls.Certificate{pair}
	return cfg, nil
}

package lockcluster_test

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/pki"
)

// tlsDir creates a CA and a certificate "app" signed by it, as
// 'lockcluster tls' does.
func tlsDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := pki.CreateCA(dir, "test CA", time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := pki.CreateCert(pki.CertRequest{CADir: dir, OutDir: dir, Name: "app", Validity: time.Hour}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestTLSFilesConfig(t *testing.T) {
	dir := tlsDir(t)
	ca, crt, key := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "app.crt"), filepath.Join(dir, "app.key")

	cfg, err := lockcluster.TLSFiles{CA: ca, Cert: crt, Key: key}.Config()
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Certificates) != 1 || cfg.RootCAs == nil {
		t.Fatalf("config: %d certificates, RootCAs %v: want the client certificate and the CA", len(cfg.Certificates), cfg.RootCAs)
	}
	leaf, err := x509.ParseCertificate(cfg.Certificates[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: cfg.RootCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("the client certificate does not verify against the loaded CA: %v", err)
	}

	// The CA alone: server-verified TLS, no client certificate.
	cfg, err = lockcluster.TLSFiles{CA: ca}.Config()
	if err != nil || len(cfg.Certificates) != 0 || cfg.RootCAs == nil {
		t.Fatalf("CA only: %v, %+v", err, cfg)
	}
}

// Every error names the file at fault.
func TestTLSFilesErrorsNameTheFile(t *testing.T) {
	dir := tlsDir(t)
	ca, crt, key := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "app.crt"), filepath.Join(dir, "app.key")
	missing := filepath.Join(dir, "missing.pem")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not PEM\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		files lockcluster.TLSFiles
		want  string // the file the error must name
	}{
		{"missing CA", lockcluster.TLSFiles{CA: missing, Cert: crt, Key: key}, missing},
		{"CA not PEM", lockcluster.TLSFiles{CA: garbage}, garbage},
		{"missing certificate", lockcluster.TLSFiles{CA: ca, Cert: missing, Key: key}, missing},
		{"missing key", lockcluster.TLSFiles{CA: ca, Cert: crt, Key: missing}, missing},
		{"certificate without key", lockcluster.TLSFiles{CA: ca, Cert: crt}, crt},
		{"key without certificate", lockcluster.TLSFiles{CA: ca, Key: key}, key},
		{"key not PEM", lockcluster.TLSFiles{Cert: crt, Key: garbage}, garbage},
		{"CA's key for the certificate", lockcluster.TLSFiles{Cert: crt, Key: filepath.Join(dir, "ca.key")}, crt},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := c.files.Config()
			if err == nil {
				t.Fatalf("no error (config %+v)", cfg)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not name %s", err, c.want)
			}
		})
	}
}

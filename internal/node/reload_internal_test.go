package node

import (
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lockcluster/lockcluster/internal/pki"
	"github.com/lockcluster/lockcluster/internal/testutil"
)

// tlsFixture is a CA, the files a node is configured with (dir/node.crt,
// dir/node.key) and certificates to rotate them to (made by cert).
type tlsFixture struct {
	t     *testing.T
	ca    string // the CA's directory
	files TLSFiles
}

func newTLSFixture(t *testing.T) *tlsFixture {
	ca := t.TempDir()
	if err := pki.CreateCA(ca, "reload test CA", time.Hour); err != nil {
		t.Fatal(err)
	}
	f := &tlsFixture{t: t, ca: ca}
	dir := f.cert("node")
	f.files = TLSFiles{CA: filepath.Join(ca, "ca.crt"), Cert: filepath.Join(dir, "node.crt"), Key: filepath.Join(dir, "node.key")}
	return f
}

// cert makes a new certificate named name in a directory of its own and
// returns the directory.
func (f *tlsFixture) cert(name string) string {
	dir := f.t.TempDir()
	if err := pki.CreateCert(pki.CertRequest{CADir: f.ca, OutDir: dir, Name: name, Hosts: []string{"127.0.0.1", "localhost"}, Validity: time.Hour}); err != nil {
		f.t.Fatal(err)
	}
	return dir
}

// copy writes the file dir/name over dst, in place.
func (f *tlsFixture) copy(dir, name, dst string) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		f.t.Fatal(err)
	}
}

// serial is the serial number of the certificate in file.
func serialOf(t *testing.T, file string) *big.Int {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(file, strings.TrimSuffix(file, ".crt")+".key")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber
}

// serve accepts TLS connections on a loopback listener with cfg, and
// sends one byte on each whose handshake succeeded, until the test ends.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	tl := tls.NewListener(l, cfg)
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if c.(*tls.Conn).Handshake() != nil {
					return
				}
				_, _ = c.Write([]byte{1}) // the handshake is done: the client reads this
				_, _ = c.Read(make([]byte, 1))
			}()
		}
	}()
	return l.Addr().String()
}

// handshake dials addr with cfg and returns the serial of the certificate
// the server presented (nil: the handshake failed), and the connection.
func handshake(t *testing.T, addr string, cfg *tls.Config) (*big.Int, *tls.Conn) {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, nil
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Handshake(); err != nil {
		return nil, nil
	}
	// TLS 1.3: a refused client certificate shows at the first read, not
	// in the client's handshake.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != nil {
		return nil, nil
	}
	_ = c.SetReadDeadline(time.Time{})
	return c.ConnectionState().PeerCertificates[0].SerialNumber, c
}

// A new state serves every new handshake of the client API, raft's
// listener and the HTTP port, and is what the node dials with; the
// connections already open keep theirs. Raft's listener requires a client
// certificate of the CA.
func TestTLSStoreSwap(t *testing.T) {
	f := newTLSFixture(t)
	st, err := loadTLS(f.files)
	if err != nil {
		t.Fatal(err)
	}
	logs := &testutil.Buffer{}
	s := newTLSStore(st, hclog.New(&hclog.LoggerOptions{Output: logs}))
	api, raft, http := serve(t, s.serverConfig()), serve(t, s.raftConfig()), serve(t, s.httpConfig())
	client := func() *tls.Config { return &tls.Config{RootCAs: st.pool, ServerName: "127.0.0.1"} }

	old := serialOf(t, f.files.Cert)
	for name, addr := range map[string]string{"api": api, "http": http} {
		if got, _ := handshake(t, addr, client()); got == nil || got.Cmp(old) != 0 {
			t.Fatalf("%s presents %v, want %v", name, got, old)
		}
	}
	if got, _ := handshake(t, raft, client()); got != nil {
		t.Fatal("raft's listener took a peer without a certificate")
	}
	peer := s.peerConfig()
	peer.ServerName = "127.0.0.1"
	got, open := handshake(t, raft, peer)
	if got == nil || got.Cmp(old) != 0 {
		t.Fatalf("raft presents %v, want %v", got, old)
	}

	dir := f.cert("node")
	f.copy(dir, "node.key", f.files.Key)
	f.copy(dir, "node.crt", f.files.Cert)
	next, err := loadTLS(f.files)
	if err != nil {
		t.Fatal(err)
	}
	s.swap(next, "test")
	now := serialOf(t, f.files.Cert)
	for name, addr := range map[string]string{"api": api, "http": http} {
		if got, _ := handshake(t, addr, client()); got == nil || got.Cmp(now) != 0 {
			t.Fatalf("%s presents %v after the swap, want %v", name, got, now)
		}
	}
	peer = s.peerConfig()
	peer.ServerName = "127.0.0.1"
	if got, _ := handshake(t, raft, peer); got == nil || got.Cmp(now) != 0 {
		t.Fatalf("raft presents %v after the swap, want %v", got, now)
	}
	if leaf, err := x509.ParseCertificate(peer.Certificates[0].Certificate[0]); err != nil || leaf.SerialNumber.Cmp(now) != 0 {
		t.Fatalf("the node dials with %v, want %v", leaf.SerialNumber, now)
	}
	if cs := open.ConnectionState(); cs.PeerCertificates[0].SerialNumber.Cmp(old) != 0 {
		t.Fatal("an open connection changed certificates")
	}
	if _, err := open.Write([]byte{0}); err != nil {
		t.Fatalf("an open connection broke with the swap: %v", err)
	}
	if !strings.Contains(logs.String(), "TLS reloaded") || !strings.Contains(logs.String(), now.Text(16)) {
		t.Fatalf("the swap was not logged with its serial:\n%s", logs)
	}
}

// The watch's poll applies files whose contents changed once they load: a
// certificate without its key (a rotation half done) is not applied, and
// said once however many polls see it; files that did not change are not
// loaded again.
func TestTLSStorePoll(t *testing.T) {
	f := newTLSFixture(t)
	st, err := loadTLS(f.files)
	if err != nil {
		t.Fatal(err)
	}
	logs := &testutil.Buffer{}
	s := newTLSStore(st, hclog.New(&hclog.LoggerOptions{Output: logs}))
	s.poll()
	if s.state() != st || logs.String() != "" {
		t.Fatalf("a poll of unchanged files changed the state or logged: %q", logs)
	}

	dir := f.cert("node")
	f.copy(dir, "node.crt", f.files.Cert) // the key is still the old one
	for range 3 {
		s.poll()
	}
	if s.state() != st {
		t.Fatal("a certificate without its key was applied")
	}
	if n := strings.Count(logs.String(), "do not load"); n != 1 {
		t.Fatalf("a half-done rotation logged %d times over three polls, want once:\n%s", n, logs)
	}

	f.copy(dir, "node.key", f.files.Key)
	s.poll()
	if s.state() == st {
		t.Fatal("the completed rotation was not applied")
	}
	if got, want := s.state().leaf.SerialNumber, serialOf(t, f.files.Cert); got.Cmp(want) != 0 {
		t.Fatalf("serial %v in force, want %v", got, want)
	}
	if !strings.Contains(logs.String(), "by=watch") {
		t.Fatalf("the watch's reload was not logged:\n%s", logs)
	}

	// A CA file that holds no certificate: not applied either.
	applied := s.state()
	if err := os.WriteFile(f.files.CA, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.poll()
	if s.state() != applied || !strings.Contains(logs.String(), f.files.CA) {
		t.Fatalf("a broken CA file: applied %v; the log does not name it:\n%s", s.state() != applied, logs)
	}
}

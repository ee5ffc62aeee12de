package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"strings"
	"testing"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

func TestFromMember(t *testing.T) {
	secret := strings.Repeat("s", 32)
	md := func(kv ...string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
	}
	withCert := func(ctx context.Context, cn string, verified bool) context.Context {
		cert := &x509.Certificate{Subject: pkix.Name{CommonName: cn}}
		st := tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
		if verified {
			st.VerifiedChains = [][]*x509.Certificate{{cert}}
		}
		return peer.NewContext(ctx, &peer.Peer{AuthInfo: credentials.TLSInfo{State: st}})
	}
	members := func(id string) bool { return id == "node1" }
	for _, c := range []struct {
		name   string
		ctx    context.Context
		secret string
		want   bool
	}{
		{"the secret", md(MemberSecretKey, MemberSecretValue(secret)), secret, true},
		{"no secret", context.Background(), secret, false},
		{"a wrong secret", md(MemberSecretKey, MemberSecretValue(strings.Repeat("x", 32))), secret, false},
		{"the secret raw, not hex", md(MemberSecretKey, secret), secret, false},
		{"the secret twice", md(MemberSecretKey, MemberSecretValue(secret), MemberSecretKey, MemberSecretValue(secret)), secret, false},
		{"no secret known here", md(MemberSecretKey, ""), "", false},
		{"a member's certificate", withCert(context.Background(), "node1", true), secret, true},
		{"a member's name, unverified", withCert(context.Background(), "node1", false), secret, false},
		{"another certificate", withCert(context.Background(), "stranger", true), secret, false},
	} {
		if got := FromMember(c.ctx, c.secret, members); got != c.want {
			t.Errorf("%s: FromMember = %v, want %v", c.name, got, c.want)
		}
	}
	if !PresentsMemberSecret(md(MemberSecretKey, "00")) || PresentsMemberSecret(context.Background()) {
		t.Error("PresentsMemberSecret")
	}
}

func TestNodeIdentity(t *testing.T) {
	off, _ := New(Config{})
	on, err := New(Config{AdminTokens: []string{"admin-0123456789abcdef"}, AdminIdentities: []string{"node0"}})
	if err != nil {
		t.Fatal(err)
	}
	if off.NodeIdentity("node0") || !on.NodeIdentity("node0") || on.NodeIdentity("admin-0123456789abcdef") || (*Authorizer)(nil).NodeIdentity("node0") {
		t.Fatal("NodeIdentity: want only the admin identities, with auth on")
	}
}

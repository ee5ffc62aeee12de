package auth

import (
	"context"
	"crypto/subtle"
	"encoding/hex"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// Member-only calls. Some calls are made only by the cluster's nodes, to
// each other: Cluster.Touch (a follower forwards its clients' heartbeats
// to the leader) and the metadata that marks a call as forwarded by a node
// (internal/server/member.go lists them). Such a call must prove that it
// comes from a member, with auth on or off, by either of:
//
//   - the cluster secret, under MemberSecretKey: drawn once by the
//     cluster's first leader and replicated in the state machine
//     (fsm.SetClusterSecret), so every member, and only a member, has it;
//     a node sends it on every call it makes to another node;
//   - a verified client certificate (mutual TLS) with an identity that
//     names a member (its raft server id, e.g. the common name node0 of
//     node0's certificate) or that auth knows as a node's (an admin
//     identity: the nodes' certificates, typically).
//
// A bearer token is not a member's proof, not even an admin token: it
// identifies whoever holds it, not a node of this cluster.

// MemberSecretKey is the metadata key a node sends the cluster secret
// under (hex), on the calls it makes to other nodes.
const MemberSecretKey = "lockcluster-cluster-secret"

// MemberSecretValue is how secret travels under MemberSecretKey.
func MemberSecretValue(secret string) string { return hex.EncodeToString([]byte(secret)) }

// FromMember reports whether the call ctx proves that it comes from a
// member: it carries secret (the cluster secret as this node applied it;
// "" proves nothing) under MemberSecretKey, or a verified client
// certificate with an identity for which isMember is true.
func FromMember(ctx context.Context, secret string, isMember func(identity string) bool) bool {
	return secretPresented(ctx, secret) || memberCertificate(ctx, isMember)
}

// PresentsMemberSecret reports whether the call carries any value under
// MemberSecretKey, right or wrong.
func PresentsMemberSecret(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(MemberSecretKey)) > 0
}

func secretPresented(ctx context.Context, secret string) bool {
	if secret == "" {
		return false
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vs := md.Get(MemberSecretKey)
	if len(vs) != 1 {
		return false
	}
	want := MemberSecretValue(secret)
	return subtle.ConstantTimeCompare([]byte(vs[0]), []byte(want)) == 1
}

func memberCertificate(ctx context.Context, isMember func(string) bool) bool {
	if isMember == nil {
		return false
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return false
	}
	for _, id := range Identities(&ti.State) { // verified chains only
		if isMember(id) {
			return true
		}
	}
	return false
}

// NodeIdentity reports whether a client-certificate identity is one auth
// knows as a node's: an admin identity (false when auth is off).
func (a *Authorizer) NodeIdentity(identity string) bool {
	return a.Enabled() && a.table().adminIDs[identity]
}

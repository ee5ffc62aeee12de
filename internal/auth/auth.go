// Package auth decides who may use which namespace (SPEC §10). A caller
// proves its right with a bearer token ("authorization: Bearer T") or with
// the identity of its verified client certificate (mutual TLS). Tokens are
// kept only as SHA-256 digests and compared in constant time; they are never
// logged. A caller without the right to a namespace gets PermissionDenied
// and learns nothing about it, not even whether it exists.
//
// This package is implementation, not API: it makes no compatibility
// promise, and it exports only what other lockcluster packages use. The
// stable API is the client (package lockcluster) and the wire contract
// (api/lockclusterv1); the credentials file's format is the lockcluster
// command's.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// Config is the auth section of a node's configuration file.
type Config struct {
	// AdminTokens grant every namespace and the cluster operations
	// (members, status, join, leave). The nodes use the first one for the
	// calls they make to each other.
	AdminTokens []string `yaml:"admin-tokens"`
	// AdminIdentities: client-certificate identities with admin rights
	// (the nodes' own certificates, typically).
	AdminIdentities []string `yaml:"admin-identities"`
	// Namespaces: who may use each namespace.
	Namespaces map[string]Namespace `yaml:"namespaces"`
}

// Namespace lists the credentials of one namespace.
type Namespace struct {
	Tokens     []string `yaml:"tokens"`
	Identities []string `yaml:"identities"`
}

// enabled reports whether any credential is configured.
func (c Config) enabled() bool {
	return len(c.AdminTokens) > 0 || len(c.AdminIdentities) > 0 || len(c.Namespaces) > 0
}

// validate checks the configuration, naming what is wrong (never a token).
func (c Config) validate() error {
	for name, ns := range c.Namespaces {
		if name == "" {
			return fmt.Errorf("auth: a namespace has an empty name")
		}
		if len(ns.Tokens) == 0 && len(ns.Identities) == 0 {
			return fmt.Errorf("auth: namespace %q has no token and no identity: nobody could use it", name)
		}
		for i, t := range ns.Tokens {
			if len(t) < 16 {
				return fmt.Errorf("auth: token %d of namespace %q is shorter than 16 characters", i+1, name)
			}
		}
	}
	for i, t := range c.AdminTokens {
		if len(t) < 16 {
			return fmt.Errorf("auth: admin token %d is shorter than 16 characters", i+1)
		}
	}
	if c.enabled() && len(c.AdminTokens) == 0 && len(c.AdminIdentities) == 0 {
		return fmt.Errorf("auth: namespaces are configured but no admin token or identity: the nodes need one to call each other")
	}
	return nil
}

// Authorizer answers who may do what. Its credentials change at run time
// with Swap (a reload): a check reads one table, the old or the new, never
// a mix; whether auth is on at all is fixed when it is built.
type Authorizer struct {
	enabled bool
	t       atomic.Pointer[Table]
}

// Table is one set of credentials, digested: New builds the first, Prepare
// the next ones.
type Table struct {
	admin      [][32]byte
	adminIDs   map[string]bool
	namespaces map[string]grant
	nodeToken  string
}

type grant struct {
	tokens [][32]byte
	ids    map[string]bool
}

// ErrToggle is Prepare's error for credentials that would turn auth on or
// off: that needs a restart (the interceptors and the HTTP protection are
// chosen at start).
var ErrToggle = errors.New("auth: turning authentication on or off (adding the first credential or removing the last) needs a restart")

// New builds an Authorizer; a zero Config allows everything.
func New(c Config) (*Authorizer, error) {
	t, err := table(c)
	if err != nil {
		return nil, err
	}
	a := &Authorizer{enabled: c.enabled()}
	a.t.Store(t)
	return a, nil
}

// Prepare checks c and builds its table, for Swap; it changes nothing. It
// refuses, with ErrToggle, credentials that would turn auth on or off.
func (a *Authorizer) Prepare(c Config) (*Table, error) {
	if c.enabled() != a.Enabled() {
		return nil, ErrToggle
	}
	return table(c)
}

// Swap puts t in force: every check from now on reads it. A call already
// checked is not checked again; a session stream keeps the namespace its
// attach was granted.
func (a *Authorizer) Swap(t *Table) { a.t.Store(t) }

func table(c Config) (*Table, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	t := &Table{adminIDs: set(c.AdminIdentities), namespaces: map[string]grant{}}
	for _, tok := range c.AdminTokens {
		t.admin = append(t.admin, sha256.Sum256([]byte(tok)))
	}
	if len(c.AdminTokens) > 0 {
		t.nodeToken = c.AdminTokens[0]
	}
	for name, ns := range c.Namespaces {
		g := grant{ids: set(ns.Identities)}
		for _, tok := range ns.Tokens {
			g.tokens = append(g.tokens, sha256.Sum256([]byte(tok)))
		}
		t.namespaces[name] = g
	}
	return t, nil
}

// table is the credentials in force.
func (a *Authorizer) table() *Table { return a.t.Load() }

func set(xs []string) map[string]bool {
	m := map[string]bool{}
	for _, x := range xs {
		m[x] = true
	}
	return m
}

// Enabled reports whether calls are checked at all.
func (a *Authorizer) Enabled() bool { return a != nil && a.enabled }

// NodeToken is the credential a node presents to other nodes ("" when auth
// is off or the nodes authenticate by certificate).
func (a *Authorizer) NodeToken() string {
	if a == nil {
		return ""
	}
	return a.table().nodeToken
}

// Caller is what a call presented.
type Caller struct {
	token      [32]byte
	hasToken   bool
	identities []string
}

// CallerOf reads a call's bearer token and certificate identities.
func CallerOf(ctx context.Context) Caller {
	var c Caller
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if t, ok := strings.CutPrefix(v, "Bearer "); ok && t != "" {
			c.token, c.hasToken = sha256.Sum256([]byte(t)), true
		}
	}
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			c.identities = Identities(&ti.State)
		}
	}
	return c
}

// anonymous reports whether the call presented no credential at all.
func (c Caller) anonymous() bool { return !c.hasToken && len(c.identities) == 0 }

func (c Caller) matches(tokens [][32]byte, ids map[string]bool) bool {
	ok := 0
	if c.hasToken {
		for _, t := range tokens {
			ok |= subtle.ConstantTimeCompare(c.token[:], t[:])
		}
	}
	for _, id := range c.identities {
		if ids[id] {
			ok = 1
		}
	}
	return ok == 1
}

// Admin reports whether the caller holds an admin credential.
func (a *Authorizer) Admin(c Caller) bool {
	return !a.Enabled() || a.table().admits(c)
}

// admits reports whether the caller holds one of t's admin credentials.
func (t *Table) admits(c Caller) bool { return c.matches(t.admin, t.adminIDs) }

// namespace reports whether the caller may use namespace ns.
func (a *Authorizer) namespace(c Caller, ns string) bool {
	if !a.Enabled() {
		return true
	}
	t := a.table() // one table for the whole decision
	if t.admits(c) {
		return true
	}
	g, ok := t.namespaces[ns]
	if !ok {
		// Check anyway, against nothing, so that an unknown namespace takes
		// as long to refuse as a known one.
		c.matches(nil, nil)
		return false
	}
	return c.matches(g.tokens, g.ids)
}

// HTTP reports whether an HTTP request carries an admin credential: a
// bearer token ("Authorization: Bearer T", as Prometheus sends it), the
// token as a Basic password (as a browser asks for it), or an admin client
// certificate. Always true when auth is off.
func (a *Authorizer) HTTP(r *http.Request) bool {
	if !a.Enabled() {
		return true
	}
	var c Caller
	if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && t != "" {
		c.token, c.hasToken = sha256.Sum256([]byte(t)), true
	} else if _, p, ok := r.BasicAuth(); ok && p != "" {
		c.token, c.hasToken = sha256.Sum256([]byte(p)), true
	}
	c.identities = Identities(r.TLS)
	return a.Admin(c)
}

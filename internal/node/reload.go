package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockcluster/lockcluster/internal/auth"
	"github.com/lockcluster/lockcluster/internal/server"
)

// Reload applies the settings of cfg that a running node can change
// (lockcluster serve's SIGHUP):
//
//   - the TLS files (Config.TLS: certificate, key, CA, client auth): new
//     connections of every kind (client API, raft, HTTP, what this node
//     dials) use them, those already open keep theirs;
//   - the credentials (Config.Auth): the token table is swapped at once,
//     for every call checked after it;
//   - the server's settings server.Settings lists (namespace quotas,
//     refusal pacing, the audit interval, the replicated limits it
//     proposes: at once on the leader).
//
// Everything else in cfg is ignored: it is fixed for the node's life.
// Turning TLS or auth on or off needs a restart too: Reload logs a warning
// and keeps the TLS files, or the credentials, in force. Reload changes
// nothing when it returns an error (a file that does not load, invalid
// credentials or limits): the node serves on with what it had.
func (n *Node) Reload(cfg Config) error {
	n.reloadMu.Lock()
	defer n.reloadMu.Unlock()
	// First everything that can fail, then the changes.
	var st *tlsState
	switch on := cfg.TLS.enabled(); {
	case n.tls == nil && on:
		n.log.Warn("TLS was off at start: turning it on needs a restart; the TLS files are not used")
	case n.tls != nil && !on:
		n.log.Warn("TLS was on at start: turning it off needs a restart; the TLS files in force stay")
	case n.tls != nil:
		var err error
		if st, err = loadTLS(cfg.TLS); err != nil {
			return err
		}
	}
	table, err := n.authz.Prepare(cfg.Auth)
	if errors.Is(err, auth.ErrToggle) {
		n.log.Warn(err.Error() + "; the credentials in force stay")
	} else if err != nil {
		return err
	}
	if l := cfg.Server.Limits; l != nil {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("limits: %w", err)
		}
	}

	if st != nil {
		n.tls.swap(st, "reload")
	}
	if table != nil {
		n.authz.Swap(table)
		if n.authz.Enabled() {
			n.log.Info("credentials reloaded")
		}
	}
	s := cfg.Server
	settings := server.Settings{
		NamespaceRate: s.NamespaceRate, NamespaceBurst: s.NamespaceBurst,
		NamespaceBytesRate: s.NamespaceBytesRate, NamespaceBytesBurst: s.NamespaceBytesBurst,
		RefusalRate: s.RefusalRate, AuditRefusalInterval: s.AuditRefusalInterval,
		NodeToken: n.nodeToken(), Limits: s.Limits,
	}
	n.srv.Reload(settings)
	for _, gr := range n.others() { // every group's leader proposes the limits
		gr.srv.Reload(settings)
	}
	return nil
}

// nodeToken is the credential this node presents to the others: auth's
// first admin token in force, or Config.Server.NodeToken with auth off.
func (n *Node) nodeToken() string {
	if n.authz.Enabled() {
		return n.authz.NodeToken()
	}
	return n.cfg.Server.NodeToken
}

// watchTLS checks the TLS files every interval and puts them in force when
// their contents changed and load (tlsStore.poll).
func (n *Node) watchTLS(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n.tls.poll()
		}
	}
}

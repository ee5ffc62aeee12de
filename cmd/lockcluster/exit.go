package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/lockcluster/lockcluster"
	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// exitRemoved is serve's status when this node learns it was removed from
// the cluster (lockcluster leave): restarting it on the same data
// directory cannot help (EX_CONFIG), so a supervisor should not
// (deploy/systemd: RestartPreventExitStatus). The other statuses are in
// root.go.
const exitRemoved = 78

// exit maps an error from the client package to an exit status and a
// message that says what the user can do about it.
func (g *globals) exit(err error) error {
	var ex *exitError
	switch {
	case errors.As(err, &ex):
		return ex
	case errors.Is(err, lockcluster.ErrPermission):
		return &exitError{code: exitNoPerm, msg: fmt.Sprintf("permission denied: the cluster refused %s (namespace %q): %v", g.credential(), g.namespace, err)}
	case errors.Is(err, lockcluster.ErrUnavailable):
		if hint := g.tlsHint(); hint != "" && !errors.Is(err, lockcluster.ErrTLSMismatch) {
			return &exitError{code: exitUnavailable, msg: hint + " (" + err.Error() + ")"}
		}
		return &exitError{code: exitUnavailable, msg: err.Error()}
	case clusterLevel(err):
		// Not yet: a member runs a release without the feature. It is
		// temporary (finish the upgrade), as unavailable is.
		return &exitError{code: exitUnavailable, msg: err.Error()}
	case errors.Is(err, lockcluster.ErrInvalid), errors.Is(err, lockcluster.ErrNotSupported):
		return &exitError{code: exitUsage, msg: err.Error()}
	}
	return &exitError{code: exitFailure, msg: err.Error()}
}

// clusterLevel reports whether err is the cluster's CLUSTER_LEVEL refusal:
// a feature a member does not run yet (a rolling upgrade in progress).
func clusterLevel(err error) bool {
	var e *lockcluster.Error
	return errors.As(err, &e) && e.Reason == pb.ErrorReason_CLUSTER_LEVEL
}

// credential names the kind of credential this command presented.
func (g *globals) credential() string {
	var kinds []string
	if g.token != "" {
		kinds = append(kinds, "the bearer token (--token or LOCKCLUSTER_TOKEN)")
	}
	if g.tls.Cert != "" {
		kinds = append(kinds, fmt.Sprintf("the client certificate %s (--cert or LOCKCLUSTER_CERT)", g.tls.Cert))
	}
	if len(kinds) == 0 {
		return "a call without credentials: set --token (LOCKCLUSTER_TOKEN) or --cert/--key"
	}
	return strings.Join(kinds, " and ")
}

// tlsHint says "the node speaks TLS" when this command connects in
// plaintext and an endpoint completes a TLS handshake.
func (g *globals) tlsHint() string {
	if g.usesTLS() {
		return ""
	}
	for _, e := range g.endpoints() {
		e = strings.TrimSpace(e)
		d := &net.Dialer{Timeout: time.Second}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := (&tls.Dialer{NetDialer: d, Config: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}}).DialContext(ctx, "tcp", e)
		cancel()
		if err == nil {
			conn.Close()
			return fmt.Sprintf("the node at %s speaks TLS: set --cacert (or LOCKCLUSTER_CACERT) to the cluster's CA certificate", e)
		}
	}
	return ""
}

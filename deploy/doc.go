// Package deploy holds the deployment files (systemd, Kubernetes,
// Prometheus alert rules, a Grafana dashboard) and tests that check that
// each parses and refers to what lockcluster really serves, and that run
// the systemd unit's and the Kubernetes manifest's nodes as processes built
// from ./cmd/lockcluster. It has no code: nothing imports it.
//
// This package is implementation, not API: it exports nothing and makes no
// compatibility promise. The stable API is the client (package
// lockcluster) and the wire contract (api/lockclusterv1).
package deploy

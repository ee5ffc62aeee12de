// Package deploy holds the deployment files (systemd, Kubernetes,
// Prometheus alert rules, a Grafana dashboard) and a test that checks that
// each parses and refers to what lockcluster really serves. It has no code:
// nothing imports it.
//
// This package is implementation, not API: it exports nothing and makes no
// compatibility promise. The stable API is the client (package
// lockcluster) and the wire contract (api/lockclusterv1).
package deploy

// Package deploy holds the deployment files (systemd, Kubernetes,
// Prometheus alert rules, a Grafana dashboard) and a test that checks that
// each parses and refers to what lockcluster really serves. It has no code:
// nothing imports it.
package deploy

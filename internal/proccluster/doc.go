// Package proccluster starts and drives clusters of 'lockcluster serve'
// processes on one machine. It owns their ports (ports.go); their layout,
// data directories and log files (cluster.go); starting, killing
// (SIGKILL), pausing (SIGSTOP), resuming, stopping and restarting them on
// the same data (process.go); waiting for a leader and for the replicas
// to catch up (leader.go); and reading and comparing their /debug/digest
// answers (digest.go, hashes.go).
//
// 'lockcluster dev', the load generator's local cluster (loadgen), the
// chaos harness's local cluster (test/jepsen-lite) and the command's own
// tests all start their nodes through it. It is an implementation detail
// of the lockcluster command, importable only so that test/jepsen-lite
// can use it: it makes no compatibility promise.
package proccluster

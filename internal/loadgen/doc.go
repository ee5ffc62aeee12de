// Package loadgen is the load generator behind 'lockcluster bench' and the
// etcd comparison (test/compare-etcd): lock workloads run by many workers
// against a Driver (lockcluster through its Go client, or anything else
// that can lock a name), latency histograms, per-process CPU and memory
// from /proc, and a local cluster of 'lockcluster serve' processes.
//
// It is an implementation detail of the lockcluster command, importable
// only so that test/compare-etcd (a module of its own) can run the same
// workloads against etcd: it makes no compatibility promise, and its API
// changes whenever the command needs it to.
//
// Every run is bounded: it stops after its duration or its maximum count
// of operations, whichever comes first, and in-flight operations get a
// short grace period before their context is cancelled.
//
// Hand-off latency (release → next holder told) is measured inside one
// process on the monotonic clock: the releasing worker records when it
// starts its release, and the next holder, once its acquire returns,
// subtracts that time. Only grants whose acquire began before that release
// count as hand-offs.
package loadgen

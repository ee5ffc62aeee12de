// Package testutil holds the helpers that the tests of several packages
// share, so that each exists once:
//
//   - Eventually, the one way a test polls until a condition holds;
//   - LogWriter and Logger, which send a node's hclog output to t.Log
//     until the test's cleanups have run;
//   - Tmpfs and Ballast (Linux), a small file system of the test's own and
//     the file that fills it, for the full-disk tests;
//   - Buffer, a log destination goroutines may write while a test reads.
//
// It owns nothing of the product: only tests and the test-support package
// internal/node/nodetest import it, never production code. It imports no
// lockcluster package, so that the tests of any package (raftnode's
// included) may use it.
package testutil

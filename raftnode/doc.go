// Package raftnode runs one member of a Raft group (hashicorp/raft) around
// any raft.FSM. It knows nothing about locks: the lock manager is an FSM
// written elsewhere (package fsm), and the session tracker and the API
// consume this package through small interfaces of their own.
//
// What it owns:
//
//   - Storage (store.go): the log in DataDir/wal (raft-wal: one fsync per
//     append; Config.LogStore bolt keeps it in raft.db as before, and a
//     directory whose log is in raft.db moves it into the WAL once) behind
//     a 512-entry raft.LogCache; the stable store in DataDir/raft.db
//     (raft-boltdb/v2); DataDir/snapshots (two retained); DataDir/LOCK, held
//     while the node runs; and DataDir/DIVERGED once the replica fenced
//     itself.
//   - Transport: raft's NetworkTransport over TCP, or over a caller's
//     raft.StreamLayer (TLS), optionally dialling through a
//     raft.ServerAddressProvider (fault-injecting proxies in chaos tests).
//     Replication pipelining is off by default (maxRPCsInFlight = 1; see
//     hashicorp/raft issue #612).
//   - Lifecycle: New bootstraps a cluster from Config.Bootstrap when
//     DataDir has no raft state, waits to be joined when it has no
//     Bootstrap either, and otherwise resumes from disk. Shutdown hands
//     leadership over first when it can.
//   - Writes: Propose (group-committed by raft), with raft's failures
//     mapped once, here, to ErrNotLeader (*NotLeaderError with a leader
//     hint), ErrNotApplied, ErrOutcomeUnknown and ErrShutdown.
//   - Linearizable reads: ReadBarrier (read index: a barrier per term,
//     VerifyLeader, then wait for the FSM to catch up; see its comment).
//   - Membership: Join, Leave, Members, leadership transfer, snapshots.
//   - Leadership notifications: SubscribeLeadership, level-triggered and
//     latest-wins, for any number of consumers.
//   - Safety beyond the library (DESIGN.md): the paper's follower commit
//     rule (a transport wrapper clamps LeaderCommitIndex), a monotonic log
//     store, a running hash of every applied entry carried in snapshots
//     (AppliedHash, HashAt), and leader checkpoints of that hash that
//     fence a diverged replica (Diverged).
//
// Everything logs through the hclog.Logger in Config.
//
// Build and test with -tags hashicorpmetrics, and keep
// github.com/hashicorp/raft at v1.7.3 (see ECOSYSTEM.md in the project notes).
//
// This package is implementation, not API: it makes no compatibility
// promise, and it exports only what other lockcluster packages use. It
// imports no lockcluster package (imports_test.go at the repository root
// checks). The stable API is the client (package lockcluster) and the wire
// contract (api/lockclusterv1).
package raftnode

// Package server implements the lockcluster.v1 gRPC services on one node.
// It composes the lock manager (fsm), this node's member of the replicated
// log, seen through the small Replica interface it defines (replica.go;
// *raftnode.Node in production), and session liveness (session, which owns
// the leader's deadlines, the re-arm after a change of leader and the
// heartbeat path; this package only feeds it applied entries and
// leadership changes and carries its calls over the log and gRPC): writes
// are proposed to the log (or forwarded to the leader's API when this node
// does not lead), reads go through a read barrier, and the events of every
// applied entry are fanned out to the session streams attached here. The
// leader probes every member's API (probe.go) so that Members reports
// reachability and lag as the leader sees them.
//
// membership.go is the one owner of membership: join and leave (raft's
// configuration, through the Replica), the member directory (the
// fsm.SetMember records of where members serve) and the rule by which a
// node learns it was removed; the Join, Leave and Members handlers wrap
// it. A leave is safe to retry from any point, and the leader removes the
// directory's stale records (ids not in the configuration).
//
// member.go says which calls only the cluster's own nodes may make:
// Cluster.Touch and the forwarding marks need the cluster secret (drawn by
// the first leader, replicated in the fsm) or a member's client
// certificate, with auth on or off (MemberOptions takes a non-member's
// marks off).
//
// level.go is the version gate of rolling upgrades: the leader learns each
// member's protocol level (fsm/level.go) from its probes, and nothing
// newer than the lowest is proposed (gateLevel, before every proposal).
//
// Its tests run without raft: fake_test.go implements Replica with an
// in-memory log applied straight to each node's fsm.Machine and servers
// talking gRPC over in-memory connections, with a fake clock; the tests
// of whole nodes (raft, auth, audit) are in internal/node.
//
// Errors cross into gRPC in one place, internal/rpcerr: fsm codes, raftnode
// sentinels and this node's own conditions become gRPC codes with a
// google.rpc.ErrorInfo whose reason is an lockclusterv1.ErrorReason name
// and whose metadata names the Web Locks error (SPEC §9). Messages that do
// not decode (invalid UTF-8, truncated, garbage) become InvalidArgument
// there too, through the server codec and interceptors of codec.go
// (DecodeOptions), rather than gRPC's Internal.
//
// audit.go writes the audit log (AuditOptions): steals, admins' releases,
// aborts and closes, refused credentials. A session stream's backlog is
// capped in events and in bytes (hub.go, Config.StreamBacklogBytes), a
// session's streams on a node in number (Config.MaxStreamsPerSession),
// and a stream the hub cuts ends even while its client does not read
// (streamsend.go).
//
// pages.go sends what may be larger than one gRPC message in pieces of
// about 1 MiB: a session's sync, to a client that assembles it
// (Attach.chunked_sync), and a namespace's Query answer (QueryPages).
//
// record.go serves records (SetRecord, on the write path of a release;
// GetRecord, linearizable as Query). internal/watchhist is the bounded
// history of applied changes every node keeps (fed by internal/node from
// its raft adapter, from before the first entry), and watch.go the Watch
// RPC: a
// linearizable snapshot, then a cursor over the history; COMPACTED when
// the cursor is older than the history, never a silent gap.
//
// groups.go is the groundwork for several Raft groups in one cluster
// (issue 27, shared/design/groups.md), and changes nothing with one group.
// Every index a client sees or sends is logical (fsm.Machine.Logical: the
// position of the entry in its group's log; with one group, the Raft
// index), while raft, the hub, the watch history and Status keep the raw
// one (the hub and watch.go convert at their edges). The reads and stream
// ends of this package that would answer "empty" or "session closed"
// check the slot's ownership first, so that a group that does not serve a
// namespace answers "moving" (rpcerr: Unavailable), never a status that
// ends the client's session.
//
// This is implementation, with no compatibility promise: internal/node is its
// only user. The stable API is the wire contract (api/lockclusterv1) and
// the Go client (the root package).
package server

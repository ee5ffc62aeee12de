// Package server implements the lockcluster.v1 gRPC services on one node.
// It composes the lock manager (fsm), the Raft member (raftnode) and the
// leader's session deadlines (session): writes are proposed to the log (or
// forwarded to the leader's API when this node does not lead), reads go
// through a read barrier, and the events of every applied entry are fanned
// out to the session streams attached here.
//
// Errors cross into gRPC in one place, errors.go: fsm codes and raftnode
// sentinels become gRPC codes with a google.rpc.ErrorInfo whose reason is
// an lockclusterv1.ErrorReason name and whose metadata names the Web Locks
// error (SPEC §9).
package server

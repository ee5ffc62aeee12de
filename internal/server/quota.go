package server

import (
	"fmt"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/rpcerr"
)

// A namespace's write quota: entries a second (Config.NamespaceRate) and
// bytes of entry a second (Config.NamespaceBytesRate, fsm.EntryBytes), each
// a token bucket with its burst. A tenant of large entries (64 names of
// 1 KiB: 64 KiB each) fills the log, the disks and the followers' links
// far below any sensible entry rate; the byte rate bounds it.
//
// Where it is decided: on every node, for the writes its clients send it,
// before anything is forwarded. A follower charges the writes it receives
// to buckets of its own, at the same rate and burst, and refuses there a
// write over them; what it lets through is forwarded and charged again by
// the leader, whose buckets see every write of the namespace. So:
//
//   - the quota is never looser than the leader's buckets alone: every
//     write that reaches the log passed them, as before;
//   - a follower never refuses a write of a namespace that keeps to its
//     quota: its buckets see a subset of the namespace's writes, and a
//     subset of a stream that keeps to a rate and burst keeps to them too
//     (in any interval it has no more writes, or bytes, than the whole);
//     the follower refuses only when the writes sent through it alone are
//     over the quota, so the namespace is over it too;
//   - a namespace over its quota through a follower is refused there, at
//     that node's cost, without a forwarded call: a flood costs each node
//     the refusals of its own clients, not twice (follower and leader).
//
// Buckets are per node and not replicated (like the session rate): set
// the rates alike on every node, as a node that becomes leader applies its
// own. A write a follower let through and the leader refused has spent a
// token of each: that is the namespace over its quota losing a little more,
// never one within it.

// Why a write was refused before the log, for the metrics
// (RefusalObserver): reasons of the gate's own refusals.
const (
	RefusedRate          = "rate"           // the namespace's entry rate (NamespaceRate)
	RefusedBytesRate     = "bytes_rate"     // the namespace's byte rate (NamespaceBytesRate)
	RefusedSessionRate   = "session_rate"   // the session's write rate on this node (SessionRate)
	RefusedSessions      = "sessions"       // the namespace's sessions limit
	RefusedPending       = "pending"        // the session's pending or held limit
	RefusedSize          = "size"           // a name, scope, label or reason over its limit
	RefusedSessionSecret = "session_secret" // a wrong or missing session secret
	RefusedCredential    = "credential"     // auth refused the call or stream (audit.go), of any method
)

// LimitRefusalReasons are every reason RefusalObserver.LimitRefused is told.
var LimitRefusalReasons = []string{RefusedRate, RefusedBytesRate, RefusedSessionRate, RefusedSessions, RefusedPending, RefusedSize, RefusedSessionSecret, RefusedCredential}

// RefusalObserver, when Config.Observer implements it too, is told of each
// write this node's gate refused, with its namespace and reason (one of
// LimitRefusalReasons), on the node that refused it (a refusal the leader
// makes of a forwarded write is the leader's: the follower relays it), and
// of each session stream of a namespace cut for falling behind. Calls and
// streams auth refused are told too, reason RefusedCredential, on the node
// the client called (audit.go). internal/metrics implements it.
// Namespaces are the callers' words: the implementation must bound what
// it keeps of them.
type RefusalObserver interface {
	LimitRefused(namespace, reason string)
	StreamCut(namespace string)
}

// refused tells the observer, if it listens, of a refusal by the gate.
func (s *Server) refused(ns, reason string) {
	if o, ok := s.cfg.Observer.(RefusalObserver); ok {
		o.LimitRefused(ns, reason)
	}
}

// streamCut tells the observer, if it listens, that a session stream of
// namespace ns was cut for falling behind (stream.go).
func (s *Server) streamCut(ns string) {
	if o, ok := s.cfg.Observer.(RefusalObserver); ok {
		o.StreamCut(ns)
	}
}

// refusedBy counts err, the gate's answer to a write of namespace ns at
// the step that gives reason, when it is a refusal of that kind (not an
// error that sends the call to the leader), and returns it.
func (s *Server) refusedBy(ns, reason string, err error) error {
	want := codes.ResourceExhausted
	if reason == RefusedSessionSecret {
		want = codes.PermissionDenied
	}
	if status.Code(toStatus(err)) == want {
		s.refused(ns, reason)
	}
	return err
}

// takeQuota charges cmd to its namespace's entry and byte buckets on this
// node, or refuses it (ResourceExhausted, with a RetryInfo saying when the
// bucket will hold enough) and charges nothing.
func (s *Server) takeQuota(cmd fsm.Command) error {
	bytesOn := s.nsBytes.on() // the rates change on a reload (reload.go)
	if !bytesOn && !s.nsRate.on() {
		return nil
	}
	ns, now := namespaceOf(cmd), s.cfg.Now()
	if ok, wait := s.nsRate.take(ns, now, 1); !ok {
		s.refused(ns, RefusedRate)
		rate, burst := s.nsRate.limits()
		return rpcerr.WithRetryDelay(toStatus(&fsm.Error{Code: fsm.CodeLimit,
			Msg: fmt.Sprintf("namespace %s is over its write rate limit of %g per second (burst %g): slow down", strconv.Quote(ns), rate, burst)}), wait)
	}
	if !bytesOn {
		return nil
	}
	n := fsm.EntryBytes(cmd)
	if ok, wait := s.nsBytes.take(ns, now, float64(n)); !ok {
		s.nsRate.refund(ns, 1)
		s.refused(ns, RefusedBytesRate)
		rate, burst := s.nsBytes.limits()
		return rpcerr.WithRetryDelay(toStatus(&fsm.Error{Code: fsm.CodeLimit,
			Msg: fmt.Sprintf("namespace %s is over its byte rate limit of %g bytes of entries per second (burst %g; this entry is %d bytes): slow down",
				strconv.Quote(ns), rate, burst, n)}), wait)
	}
	return nil
}

package node

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/server"
)

// A node removed from the cluster (lockcluster leave) often never hears of
// it: raft stops replicating to a server as soon as the configuration that
// drops it is appended, so its own configuration still lists it, and it
// times out and campaigns (pre-vote keeps that harmless) and logs so,
// forever. watchRemoval notices instead: once this node has been a member
// (in raft's configuration or the member directory) and has known no
// leader for removalCheck, it asks the other members for
// the cluster's membership; when a leader's answer leaves it out, the node
// says so and Removed is closed ('serve' then exits). The rule (who is a
// member, which answer decides) is the server's membership
// (server.IsMember, server.RemovedFrom); this file runs the watch.

// removalCheck is how long a member goes without a leader before it asks
// whether it was removed.
const removalCheck = 3 * time.Second

// Removed is closed when this node learns it is no longer a member.
func (n *Node) Removed() <-chan struct{} { return n.removed }

func (n *Node) watchRemoval(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	member := false
	var leaderless time.Time // since when no leader is known (zero: one is)
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
		// The removed-node rule is the server's (membership.go).
		conf, _ := n.raft.Members()
		member = member || server.IsMember(n.cfg.ID, conf, n.machine.Members())
		if id, _ := n.raft.Leader(); id != "" || !member {
			leaderless = time.Time{}
			continue
		}
		if leaderless.IsZero() {
			leaderless = time.Now()
		}
		if time.Since(leaderless) < removalCheck {
			continue
		}
		leaderless = time.Now() // ask again after another removalCheck
		if leader, ok := n.removedBy(ctx); ok {
			n.log.Error("this node was removed from the cluster (lockcluster leave): it stops. To bring it back, clear its data directory and join it again", "leader", leader)
			close(n.removed)
			return
		}
	}
}

// removedBy asks the other members in this node's directory (and the
// member it joined through) for the membership; it reports true, with the leader that answered, when a
// leader's answer does not list this node.
func (n *Node) removedBy(ctx context.Context) (string, bool) {
	if token := n.nodeToken(); token != "" { // reload.go: it may change
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	var addrs []string
	for _, m := range n.machine.Members() {
		if m.ID != n.cfg.ID && m.GRPCAddr != "" {
			addrs = append(addrs, m.GRPCAddr)
		}
	}
	if n.cfg.Join != "" { // the member it joined through, if its directory is empty
		addrs = append(addrs, n.cfg.Join)
	}
	for _, addr := range addrs {
		// secure() always sets the dial options (TLS or plaintext), as join uses them.
		cc, err := grpc.NewClient(addr, n.cfg.Server.DialOptions...)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := pb.NewClusterClient(cc).Members(cctx, &pb.MembersRequest{})
		cancel()
		cc.Close()
		if err != nil {
			continue
		}
		if leader, removed, decided := server.RemovedFrom(resp, n.cfg.ID); decided {
			return leader, removed
		}
	}
	return "", false
}

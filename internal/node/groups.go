package node

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/raftmux"
	"github.com/lockcluster/lockcluster/internal/server"
	"github.com/lockcluster/lockcluster/internal/watchhist"
	"github.com/lockcluster/lockcluster/raftnode"
)

// The group manager (issue 27 phase 3; groups.md §10.3). A node of a
// cluster of G groups runs, per group, a lock manager (fsm.NewGroup), its
// raft adapter, a Raft member and a server.Server; group 0 is the
// cluster as it was before groups, and holds the member directory and the
// cluster secret. The groups share one raft port (internal/raftmux: group
// 0's connections carry no header) and one gRPC port (router.go). Group
// g ≥ 1 keeps its log in DataDir/groups/g<g>/raft with 8 MiB WAL
// segments. With one group (the default) none of this runs: the node is
// exactly what it was (groups.md I4).

// MaxGroups bounds Config.Groups: the design's cap of group replicas per
// node (groups.md §3.2), which also keeps session ids of every group
// below 2^53 (§6.5).
const MaxGroups = 32

// groupWALSegment is the WAL segment size of a group g ≥ 1 (groups.md §4.1).
const groupWALSegment = 8 << 20

// group is one Raft group on this node.
type group struct {
	id      uint16
	machine *fsm.Machine
	hist    *watchhist.History
	raft    *raftnode.Node
	srv     *server.Server
}

// checkGroups checks Config.Groups.
func checkGroups(cfg Config) error {
	if cfg.Groups < 0 || cfg.Groups > MaxGroups {
		return fmt.Errorf("node: groups %d: want 1 to %d", cfg.Groups, MaxGroups)
	}
	if cfg.Groups > 1 && cfg.Join != "" && len(cfg.Bootstrap) == 0 {
		return fmt.Errorf("node: groups %d with join %s: a node cannot join a cluster of several groups yet (issue 27, phase 4); bootstrap every member together", cfg.Groups, cfg.Join)
	}
	return nil
}

// groupDir is where group g keeps its raft state.
func groupDir(dataDir string, g uint16) string {
	if g == 0 {
		return filepath.Join(dataDir, "raft")
	}
	return filepath.Join(dataDir, "groups", "g"+strconv.Itoa(int(g)), "raft")
}

// raftMux listens on the raft address for every group: over the TLS
// stream layer when the files configure one (security.go), else plain
// TCP.
func (n *Node) raftMux() (*raftmux.Mux, error) {
	if sl, ok := n.cfg.Raft.StreamLayer.(*streamLayer); ok {
		dial := func(addr string, timeout time.Duration) (net.Conn, error) {
			return sl.Dial(raft.ServerAddress(addr), timeout)
		}
		return raftmux.New(sl.Listener, sl.Addr(), dial, n.dropped), nil
	}
	l, err := net.Listen("tcp", n.cfg.RaftAddr)
	if err != nil {
		return nil, fmt.Errorf("node: raft address %s: %w", n.cfg.RaftAddr, err)
	}
	adv, err := advertiseAddr(l, n.cfg.AdvertiseRaft) // streamlayer.go
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("node: %w", err)
	}
	dial := func(addr string, timeout time.Duration) (net.Conn, error) {
		return net.DialTimeout("tcp", addr, min(timeout, dialTimeout))
	}
	return raftmux.New(l, adv, dial, n.dropped), nil
}

func (n *Node) dropped(remote net.Addr, why string) {
	n.log.Warn("raft connection closed unrouted", "remote", remote, "why", why)
}

// startGroup builds group g ≥ 1 on this node: its machine, history,
// raft member (on the mux) and server, whose config is group 0's with
// the group's own pieces.
func (n *Node) startGroup(g uint16, base server.Config, mux *raftmux.Mux) (*group, error) {
	gr := &group{id: g, machine: fsm.NewGroup(g)}
	gr.machine.KeepChangesWhenWatched()
	gr.hist = watchhist.New(base.WatchHistory)
	layer, err := mux.Group(g)
	if err != nil {
		return nil, err
	}
	rcfg := n.cfg.Raft
	rcfg.ID, rcfg.DataDir, rcfg.StreamLayer, rcfg.BindAddr = n.cfg.ID, groupDir(n.cfg.DataDir, g), layer, ""
	rcfg.AdvertiseAddr = n.cfg.AdvertiseRaft
	rcfg.Bootstrap, rcfg.Logger = n.cfg.Bootstrap, n.log.Named("raft").With("group", g)
	rcfg.BootstrapStamp = uint64(orDefault(base.ProtocolLevel, fsm.ProtocolLevel))
	rcfg.WALSegmentSize = groupWALSegment
	rcfg.WALMetricLabels = map[string]string{"group": strconv.Itoa(int(g))}
	srv := &sinkHolder{}
	adapter := n.adapter(gr.machine, gr.hist, srv, n.log.Named("fsm").With("group", g)) // node.go
	if gr.raft, err = raftnode.New(rcfg, adapter); err != nil {
		return nil, fmt.Errorf("node: group %d: %w", g, err)
	}
	scfg := base
	scfg.Machine, scfg.Directory, scfg.Group, scfg.History = gr.machine, n.machine, g, gr.hist
	scfg.Logger = n.log.Named("api").With("group", g)
	scfg.BootstrapLevel = int(gr.raft.BootstrapStamp())
	scfg.CallInterceptor = chainCalls(n.metrics.CallInterceptor(), n.authz.Unary(), server.FenceUnary(gr.raft.Unfit))
	gr.srv = server.New(scfg)
	srv.set(gr.srv)
	return gr, nil
}

// runGroups starts the servers of groups g ≥ 1 and the spread.
func (n *Node) runGroups(ctx context.Context) {
	for _, gr := range n.others() {
		n.wg.Add(1)
		go func() { defer n.wg.Done(); gr.srv.Run(ctx, gr.raft) }()
	}
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.runMover(ctx) }()
}

// shutdownGroups stops the raft members of groups g ≥ 1.
func (n *Node) shutdownGroups(ctx context.Context) error {
	var first error
	for _, gr := range n.others() {
		if err := gr.raft.Shutdown(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// others are the groups g ≥ 1 (none with one group).
func (n *Node) others() []*group {
	if len(n.groups) < 2 {
		return nil
	}
	return n.groups[1:]
}

// closeGroups stops what startGroup started when the node fails to start.
func (n *Node) closeGroups() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = n.raft.Shutdown(ctx)
	_ = n.shutdownGroups(ctx)
	n.closeMux()
}

// closeMux closes the shared raft port (no-op with one group).
func (n *Node) closeMux() {
	if n.mux != nil {
		_ = n.mux.Close()
	}
}

// unready says why this node does not serve (nil: it does): with one
// group, that group is unfit or knows no leader; with several, any group
// is, or the initial spread is not done as this node's replicas see it.
// Health, /readyz, and so the deploy files' probes, read it.
func (n *Node) unready() error {
	groups := n.groups
	if groups == nil {
		groups = []*group{{raft: n.raft}}
	}
	for _, gr := range groups {
		prefix := ""
		if n.groups != nil {
			prefix = "group " + strconv.Itoa(int(gr.id)) + ": "
		}
		if err := gr.raft.Unfit(); err != nil {
			return fmt.Errorf("%s%w", prefix, err)
		}
		if id, _ := gr.raft.Leader(); id == "" {
			return fmt.Errorf("%sno leader", prefix)
		}
	}
	if n.groups != nil && !n.spreadDone.Load() {
		return fmt.Errorf("the slots are not spread over the %d groups yet", len(n.groups))
	}
	return nil
}

// Groups is the number of Raft groups this node runs.
func (n *Node) Groups() int { return max(len(n.groups), 1) }

// SpreadDone reports whether this node's replicas show every group
// serving its slots (always true with one group).
func (n *Node) SpreadDone() bool { return n.groups == nil || n.spreadDone.Load() }

// GroupRaft is group g's Raft member on this node (g below Groups).
func (n *Node) GroupRaft(g int) *raftnode.Node {
	if n.groups == nil {
		return n.raft
	}
	return n.groups[g].raft
}

// GroupMachine is group g's lock manager on this node (g below Groups).
func (n *Node) GroupMachine(g int) *fsm.Machine {
	if n.groups == nil {
		return n.machine
	}
	return n.groups[g].machine
}

// groupsFile records, in a data directory of a cluster of several
// groups, how many it runs: a node restarted with another --groups would
// otherwise bootstrap new, empty groups beside the old ones, or leave
// groups unserved. A data directory without it holds one group (as every
// directory of a release before groups).
func groupsFile(dataDir string) string { return filepath.Join(dataDir, "groups", "count") }

// checkGroupCount refuses a Config.Groups other than the one the data
// directory was made with, and records it for a new directory.
func checkGroupCount(cfg Config) error {
	want := max(cfg.Groups, 1)
	had := 0 // 0: a new directory (no raft state of group 0 yet)
	if entries, _ := os.ReadDir(groupDir(cfg.DataDir, 0)); len(entries) > 0 {
		had = 1 // raft state and no record: one group
		if b, err := os.ReadFile(groupsFile(cfg.DataDir)); err == nil {
			if had, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil || had < 1 {
				return fmt.Errorf("node: %s: %q is not a number of groups", groupsFile(cfg.DataDir), b)
			}
		} else if !os.IsNotExist(err) {
			return fmt.Errorf("node: %w", err)
		}
	}
	switch {
	case had != 0 && had != want:
		return fmt.Errorf("node: the data directory %s holds a cluster of %d group(s), and this node was started with --groups %d: the number of groups of a cluster cannot change yet (issue 27, phase 4); start it with --groups %d", cfg.DataDir, had, want, had)
	case had == 0 && want > 1:
		if err := os.MkdirAll(filepath.Dir(groupsFile(cfg.DataDir)), 0o755); err != nil {
			return fmt.Errorf("node: %w", err)
		}
		if err := os.WriteFile(groupsFile(cfg.DataDir), []byte(strconv.Itoa(want)+"\n"), 0o644); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	return nil
}

package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/fsm/raftfsm"
	"github.com/lockcluster/lockcluster/raftnode"
)

// The offline commands, on a stopped node's data directory: recover (a
// surviving member made a one-node cluster after the loss of a majority:
// etcd's --force-new-cluster, Consul's peers.json) and snapshot save
// --data-dir (a backup without a cluster). Both open the directory through
// raftnode (raftnode/recover.go), with the checks a node runs at start.

func newRecover(g *globals) *cobra.Command {
	host, _ := os.Hostname()
	var dataDir, id, raftAddr string
	cmd := &cobra.Command{
		Use:   "recover --data-dir D [--id ID] [--raft-addr HOST:PORT]",
		Short: "Make a stopped surviving node a one-node cluster, after losing a majority",
		Long: `Make a stopped node a one-node cluster of itself, with its whole state, when
a majority of the voters is lost for good (etcd's --force-new-cluster,
Consul's peers.json). Use it only then: while a majority runs, replace a lost
member with 'leave' and 'serve --join' instead.

D is the node's serve --data-dir, and --id its serve --id. The node must be
stopped: recover refuses a directory that a running node holds, and one that
is damaged or diverged (use another survivor, or 'snapshot restore' the last
backup). It restores the node's newest snapshot, applies every entry of its
log after it, and writes the result as a snapshot whose only voter is this
node, at the raft address its configuration has (or --raft-addr).

EVERY entry of this node's log is taken as committed: a stopped node cannot
tell which were. Writes the old majority committed that this node never
received are lost; entries this node had that were never committed (a grant
its client was never told of, say) are kept. With several survivors, recover
the most recent: the highest logTerm, then logIndex, that 'snapshot save FILE
--data-dir D -o json' prints for each.

Then: start it with 'serve' and the same settings (--bootstrap is ignored on
a directory with state; drop --join); it elects itself. Every other member
starts again only on an empty data directory, with --join this node's client
API address. A member of the old cluster must never start on its old data
directory: with another one it could elect a leader of the old
configuration, a second cluster.`,
		Args: usageArgs(0, "usage: lockcluster recover --data-dir D [--id ID] [--raft-addr HOST:PORT]"),
		RunE: func(_ *cobra.Command, _ []string) error {
			if err := g.checkOutput(); err != nil {
				return err
			}
			if dataDir == "" || id == "" {
				return &exitError{code: exitUsage, msg: "recover needs --data-dir (serve's) and --id"}
			}
			return g.runRecover(dataDir, id, raftAddr)
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the stopped node's data directory (serve's --data-dir)")
	cmd.Flags().StringVar(&id, "id", host, "the node's id (serve's --id)")
	cmd.Flags().StringVar(&raftAddr, "raft-addr", "", "the raft address the other nodes will dial (default: the one in its configuration)")
	return cmd
}

// offlineLogger is the offline commands' log: the checks' warnings and
// errors, on stderr.
func offlineLogger() hclog.Logger {
	lo := &hclog.LoggerOptions{Name: "lockcluster", Level: hclog.Warn, Output: os.Stderr, Color: hclog.AutoColor}
	if os.Getenv("NO_COLOR") != "" {
		lo.Color = hclog.ColorOff
	}
	return hclog.New(lo)
}

// raftDir is where serve keeps raft's state in its data directory
// (internal/node).
func raftDir(dataDir string) string { return filepath.Join(dataDir, "raft") }

// offlineError is an offline command's failure: a refusal names its reason
// and what to do; its text loses raftnode's prefix.
func offlineError(err error) error {
	return &exitError{code: exitFailure, msg: strings.ReplaceAll(err.Error(), "raftnode: ", "")}
}

func (g *globals) runRecover(dataDir, id, raftAddr string) error {
	m := fsm.New()
	res, err := raftnode.Recover(raftnode.RecoverConfig{DataDir: raftDir(dataDir), ID: id, Addr: raftAddr, Logger: offlineLogger()},
		raftfsm.New(m, raftfsm.WithLogger(offlineLogger())))
	if err != nil {
		return offlineError(err)
	}
	st := m.Stats()
	grpcAddr := ""
	for _, mem := range m.Members() {
		if mem.ID == id {
			grpcAddr = mem.GRPCAddr
		}
	}
	newAddr := res.After[0].Addr
	if g.output == "json" {
		return printJSON(os.Stdout, map[string]any{"dataDir": dataDir, "id": id, "raftAddr": newAddr, "grpcAddr": grpcAddr,
			"index": res.Index, "term": res.Term, "snapshotIndex": res.SnapshotIndex, "entries": res.Entries,
			"before": jsonMembers(res.Before), "after": jsonMembers(res.After), "sessions": st.Sessions, "held": st.Held, "pending": st.Pending})
	}
	w := os.Stdout
	fmt.Fprintf(w, "recovered %s in %s: a one-node cluster of %s at %s\n", id, dataDir, id, newAddr)
	from := fmt.Sprintf("its whole log, %d entries, up to", res.Entries)
	switch {
	case res.SnapshotIndex > 0 && res.Entries == 0:
		from = "its snapshot, at"
	case res.SnapshotIndex > 0:
		from = fmt.Sprintf("its snapshot at index %d and the %d log entries after it, up to", res.SnapshotIndex, res.Entries)
	}
	fmt.Fprintf(w, "  state:          %s index %d, term %d: %d sessions, %d held, %d pending\n", from, res.Index, res.Term, st.Sessions, st.Held, st.Pending)
	fmt.Fprintf(w, "  configuration:  was %s\n", describeMembers(res.Before))
	fmt.Fprintf(w, "                  now %s\n", describeMembers(res.After))
	fmt.Fprintf(w, "Every entry of this node's log, up to index %d, was taken as committed: writes the old\n", res.Index)
	fmt.Fprintln(w, "majority committed that this node never received are lost, and entries it had that were")
	fmt.Fprintln(w, "never committed are kept (README, Operations).")
	join := grpcAddr
	if join == "" {
		join = "<this node's client API address>"
	}
	fmt.Fprintln(w, "Next:")
	fmt.Fprintln(w, "  1. Keep the lost members from ever starting on their old data directories: with one")
	fmt.Fprintln(w, "     another they could elect a leader of the old configuration. Wipe them, or keep them off.")
	fmt.Fprintln(w, "  2. Start this node as before, with the same settings (--bootstrap is ignored now; drop --join):")
	fmt.Fprintf(w, "       lockcluster serve --id %s --data-dir %s ...\n", id, dataDir)
	fmt.Fprintf(w, "     It elects itself. Check: lockcluster --addr %s members\n", join)
	fmt.Fprintf(w, "  3. Every other member: delete its data directory, then start it with --join %s\n", join)
	fmt.Fprintln(w, "     instead of --bootstrap (with --bootstrap-check it finds this node by itself).")
	return nil
}

// recoveredMember is a server of a configuration in recover's -o json,
// named as in 'members -o json'.
type recoveredMember struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raftAddr"`
	Suffrage string `json:"suffrage"`
}

func jsonMembers(ms []raftnode.Member) []recoveredMember {
	out := make([]recoveredMember, 0, len(ms))
	for _, m := range ms {
		out = append(out, recoveredMember{ID: m.ID, RaftAddr: m.Addr, Suffrage: m.Suffrage})
	}
	return out
}

// describeMembers is "node0 127.0.0.1:7701, node1 127.0.0.1:7711 (Nonvoter)".
func describeMembers(ms []raftnode.Member) string {
	parts := make([]string, 0, len(ms))
	for _, m := range ms {
		s := m.ID + " " + m.Addr
		if m.Suffrage != "Voter" {
			s += " (" + m.Suffrage + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// saveOffline is 'snapshot save FILE --data-dir D': the stopped node's
// state (its newest snapshot and its whole log after it) in the backup
// file format, written as the online save writes it.
func (g *globals) saveOffline(dataDir, path string) error {
	m := fsm.New()
	st, err := raftnode.ReadState(raftDir(dataDir), raftfsm.New(m, raftfsm.WithLogger(offlineLogger())), offlineLogger())
	if err != nil {
		return offlineError(err)
	}
	// As the online save: the cluster secret is left out
	// (fsm/clustersecret.go), the index is the state's own.
	data, err := m.BeginSnapshot().EncodeBackup()
	if err != nil {
		return &exitError{code: exitFailure, msg: fmt.Sprintf("%s: the state does not encode: %v", dataDir, err)}
	}
	index, _, err := fsm.SnapshotHeader(data)
	if err != nil {
		return &exitError{code: exitFailure, msg: fmt.Sprintf("%s: %v", dataDir, err)}
	}
	info, err := writeSnapshotFile(path, func(w io.Writer) (lockcluster.SnapshotInfo, error) {
		return lockcluster.WriteSnapshot(w, index, st.Term, data)
	})
	if err != nil {
		return g.exit(err)
	}
	stats := m.Stats()
	if g.output == "json" {
		return printJSON(os.Stdout, struct {
			File    string `json:"file"`
			DataDir string `json:"dataDir"`
			lockcluster.SnapshotInfo
			LogIndex uint64 `json:"logIndex"` // the last entry applied: the log's last
			LogTerm  uint64 `json:"logTerm"`
			Sessions int    `json:"sessions"`
			Held     int    `json:"held"`
			Pending  int    `json:"pending"`
		}{path, dataDir, info, st.Index, st.Term, stats.Sessions, stats.Held, stats.Pending})
	}
	fmt.Printf("saved %s: index %d, %d bytes, sha256 %s (offline, from %s: its log up to its last entry, index %d of term %d, which may hold entries the cluster never committed)\n",
		path, info.Index, info.Size, info.SHA256, dataDir, st.Index, st.Term)
	return nil
}

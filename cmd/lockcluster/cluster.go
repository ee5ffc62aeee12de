package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockcluster/lockcluster"
)

// withAdmin runs f with a connection for cluster operations and a context
// bounded by --request-timeout; output says the command honours -o.
func (g *globals) withAdmin(output bool, f func(ctx context.Context, a *lockcluster.Admin, args []string) error) func(*cobra.Command, []string) error {
	return func(_ *cobra.Command, args []string) error {
		if output {
			if err := g.checkOutput(); err != nil {
				return err
			}
		}
		a, err := g.admin()
		if err != nil {
			return g.exit(err)
		}
		defer a.Close()
		ctx, cancel := g.ctx()
		defer cancel()
		return f(ctx, a, args)
	}
}

func newMembers(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "members",
		Short: "List the cluster's members, and how each looks to the leader",
		Long: `List the cluster's members. HEALTH is what the leader sees of each, from
probing its API every second: "ok", "ok, N behind" (committed entries it
has not applied), "unreachable for 12s", "fenced: WHY" when the member
answers but serves no clients ("fenced: damaged log from index 882",
"fenced: disk full", "fenced: behind", "fenced: diverged"; -o json has the
member's whole explanation as unfit), or "unknown" when no leader answered
or it has not probed the member yet.

SUFFRAGE is Voter, or Learner for a node added by 'lockcluster join' (or
'serve --join') as a learner: it receives the log but does not vote until
the leader promotes it. A learner's HEALTH says how far it is: "catching
up: N behind", "caught up (N behind): promoting" (the leader promotes it
once it has stayed within 1,000 entries, -o json's promoteWithin, for a
few probes), or, for one joined with --no-promote, "...: promote by hand"
('lockcluster promote ID'). -o json has role (voter or learner), noPromote
and lag.`,
		Args: cobra.NoArgs,
		RunE: g.withAdmin(true, func(ctx context.Context, a *lockcluster.Admin, _ []string) error {
			ms, err := a.Members(ctx)
			if err != nil {
				return g.exit(err)
			}
			g.fillVersions(ctx, ms)
			if g.output == "json" {
				return printJSON(os.Stdout, ms)
			}
			return writeMembers(os.Stdout, ms)
		}),
	}
}

// writeMembers is members' table.
func writeMembers(out io.Writer, ms []lockcluster.Member) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tROLE\tSUFFRAGE\tGRPC\tRAFT\tHTTP\tVERSION\tLEVEL\tHEALTH")
	for _, m := range ms {
		role := "follower"
		if m.Leader {
			role = "leader"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, role, suffrageText(m), m.GRPCAddr, m.RaftAddr, m.HTTPAddr, m.Version, levelText(m.Level), health(m))
	}
	return w.Flush()
}

// suffrageText is members' SUFFRAGE cell: Voter, or Learner for raft's
// non-voter.
func suffrageText(m lockcluster.Member) string {
	if m.Role == "learner" {
		return "Learner"
	}
	return m.Suffrage
}

// learnerHealth says how far learner m is from its promotion ("" when the
// answer has no promotion rule: a leader of a release before learners).
func learnerHealth(m lockcluster.Member) string {
	if m.PromoteWithin == 0 {
		return ""
	}
	caughtUp := m.Lag <= m.PromoteWithin && (m.Unfit == "" || fenceSummary(m.Unfit) == "behind")
	switch {
	case caughtUp && m.NoPromote:
		return fmt.Sprintf("caught up (%d behind): promote by hand", m.Lag)
	case caughtUp:
		return fmt.Sprintf("caught up (%d behind): promoting", m.Lag)
	case m.NoPromote:
		return fmt.Sprintf("catching up: %d behind; then promote by hand", m.Lag)
	}
	return fmt.Sprintf("catching up: %d behind", m.Lag)
}

// catchingUp reports whether m is a learner whose only fence is that it
// is behind: what a learner catching up is, not a failure.
func catchingUp(m lockcluster.Member) bool {
	return m.Role == "learner" && m.Reachable && (m.Unfit == "" || fenceSummary(m.Unfit) == "behind")
}

// health says how member m looks to the leader.
func health(m lockcluster.Member) string {
	switch {
	case !m.Probed:
		return "unknown"
	case !m.Reachable && m.LastContact.IsZero():
		return "unreachable (never answered this leader)"
	case !m.Reachable:
		return "unreachable for " + time.Since(m.LastContact).Round(time.Second).String()
	case catchingUp(m) && learnerHealth(m) != "":
		// A learner catching up is fenced as behind: that is its state.
		return learnerHealth(m)
	case m.Unfit != "":
		return "fenced: " + fenceSummary(m.Unfit)
	case m.Lag > 0:
		return fmt.Sprintf("ok, %d behind", m.Lag)
	}
	return "ok"
}

// fenceSummary is a few words for a node's unfit (raftnode's fences, as
// Status says them: raftnode/checkpoint.go, damage.go, diskguard.go and
// behind.go), for a table cell; -o json has the whole text.
func fenceSummary(unfit string) string {
	if m := damagedStore.FindStringSubmatch(unfit); m != nil {
		what := m[1]
		if what == "raft log" {
			what = "log"
		}
		return "damaged " + what + m[2]
	}
	switch {
	case strings.Contains(unfit, "cannot be written"):
		if strings.Contains(unfit, "no space left on device") || strings.Contains(unfit, "disk quota exceeded") {
			return "disk full"
		}
		return "disk not writable"
	case strings.Contains(unfit, "diverged"):
		return "diverged"
	case strings.Contains(unfit, "short of commit index"):
		return "behind"
	}
	// Not one raftnode says now: its first clause.
	if i := strings.IndexAny(unfit, ";:("); i > 0 {
		unfit = unfit[:i]
	}
	unfit = strings.TrimSpace(unfit)
	if r := []rune(unfit); len(r) > 60 {
		unfit = string(r[:59]) + "…"
	}
	return unfit
}

// damagedStore matches raftnode's storage damage: "this node's raft log
// is damaged from index 882 (...)", "this node's term and vote store is
// damaged (...)".
var damagedStore = regexp.MustCompile(`this node's (.+?) is damaged( from index \d+)?`)

// levelText is a protocol level for a table cell ("?": not known).
func levelText(l uint32) string {
	if l == 0 {
		return "?"
	}
	return strconv.FormatUint(uint64(l), 10)
}

// fillVersions asks the members the leader has no version or protocol
// level for (it has not probed them, or it is of a release before levels)
// for theirs, at their client API addresses.
func (g *globals) fillVersions(ctx context.Context, ms []lockcluster.Member) {
	var addrs []string
	for _, m := range ms {
		if (m.Version == "" || m.Level == 0) && m.GRPCAddr != "" {
			addrs = append(addrs, m.GRPCAddr)
		}
	}
	if len(addrs) == 0 {
		return
	}
	a, err := g.admin(addrs...)
	if err != nil {
		return
	}
	defer a.Close()
	for _, st := range a.Status(ctx) {
		for i := range ms {
			if ms[i].Version == "" && ms[i].GRPCAddr == st.Addr && st.Err == "" {
				ms[i].Version = st.Version
			}
			if ms[i].Level == 0 && ms[i].GRPCAddr == st.Addr && st.Err == "" {
				ms[i].Level = st.Level
			}
		}
	}
}

func newStatus(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show each endpoint's view of the cluster",
		Args:  cobra.NoArgs,
		RunE: g.withAdmin(true, func(ctx context.Context, a *lockcluster.Admin, _ []string) error {
			sts := a.Status(ctx)
			if g.output == "json" {
				return printJSON(os.Stdout, sts)
			}
			writeStatus(os.Stdout, sts)
			if answered(sts) == 0 {
				// Why? Ask once more for a typed error: a refused
				// credential (77) or a TLS node (69 with the hint).
				if _, err := a.Members(ctx); err != nil {
					return g.exit(err)
				}
				return &exitError{code: exitUnavailable, msg: "no endpoint answered"}
			}
			if err := endpointsVerdict(sts); err != nil {
				return err
			}
			// Nor a member that is not among the endpoints asked.
			if ms, err := a.Members(ctx); err == nil {
				return membersVerdict(ms)
			}
			return nil
		}),
	}
}

// writeStatus is status's table. An endpoint that answers but serves no
// clients says why in ERROR ("fenced: disk full").
func writeStatus(out io.Writer, sts []lockcluster.Status) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ENDPOINT\tID\tSTATE\tLEADER\tTERM\tCOMMIT\tAPPLIED\tSESSIONS\tHELD\tPENDING\tVERSION\tLEVEL\tERROR")
	for _, s := range sts {
		e := s.Err
		if e == "" && s.Unfit != "" {
			e = "fenced: " + fenceSummary(s.Unfit)
		}
		level := levelText(s.Level)
		if s.ClusterLevel != 0 {
			level += fmt.Sprintf(" (cluster %d)", s.ClusterLevel)
		}
		if s.Err != "" {
			level = ""
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", s.Addr, s.NodeID, s.State, s.LeaderID, s.Term, s.CommitIndex, s.AppliedIndex, s.Sessions, s.Held, s.Pending, s.Version, level, e)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return writeGroups(out, sts)
}

// writeGroups is status's second table on a cluster of several Raft
// groups: each node's replica of each group (nothing with one group).
func writeGroups(out io.Writer, sts []lockcluster.Status) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	header := false
	for _, s := range sts {
		for _, g := range s.Groups {
			if !header {
				fmt.Fprintln(out)
				fmt.Fprintln(w, "GROUP\tID\tSTATE\tLEADER\tTERM\tCOMMIT\tAPPLIED\tSLOTS\tSESSIONS\tHELD\tPENDING\tERROR")
				header = true
			}
			e := ""
			if g.Unfit != "" {
				e = "fenced: " + fenceSummary(g.Unfit)
			}
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", g.Group, s.NodeID, g.State, g.LeaderID, g.Term, g.CommitIndex, g.AppliedIndex, g.Slots, g.Sessions, g.Held, g.Pending, e)
		}
	}
	return w.Flush()
}

// answered counts the endpoints that answered status.
func answered(sts []lockcluster.Status) int {
	n := 0
	for _, s := range sts {
		if s.Err == "" {
			n++
		}
	}
	return n
}

// endpointsVerdict fails (exit 1) when an endpoint did not answer or
// answered that it serves no clients: a probe or a script must not read a
// dead or fenced node as healthy.
func endpointsVerdict(sts []lockcluster.Status) error {
	var why []string
	if failed := len(sts) - answered(sts); failed > 0 {
		why = append(why, fmt.Sprintf("%d of %d endpoints did not answer (see ERROR)", failed, len(sts)))
	}
	for _, s := range sts {
		if s.Err == "" && s.Unfit != "" {
			why = append(why, fmt.Sprintf("%s (%s) is fenced: %s", s.NodeID, s.Addr, fenceSummary(s.Unfit)))
		}
	}
	if len(why) > 0 {
		return &exitError{code: exitFailure, msg: strings.Join(why, "; ")}
	}
	return nil
}

// membersVerdict fails (exit 1) when the leader cannot reach a member, or
// the member answers that it serves no clients.
func membersVerdict(ms []lockcluster.Member) error {
	var bad []string
	for _, m := range ms {
		if m.Probed && (!m.Reachable || m.Unfit != "") && !catchingUp(m) {
			bad = append(bad, m.ID+" "+health(m))
		}
	}
	if len(bad) > 0 {
		return &exitError{code: exitFailure, msg: "as the leader sees them: " + strings.Join(bad, "; ")}
	}
	return nil
}

func newJoin(g *globals) *cobra.Command {
	var m lockcluster.Member
	var learner, voter, noPromote bool
	const usage = "usage: lockcluster join --id ID --raft-addr HOST:PORT [--grpc-addr HOST:PORT] [--voter | --no-promote]"
	cmd := &cobra.Command{
		Use:   "join --id ID --raft-addr HOST:PORT [--grpc-addr HOST:PORT] [--voter | --no-promote]",
		Short: "Add a node to the cluster, as a learner that becomes a voter once caught up",
		Long: `Add a node to the cluster. Usually a new node joins by itself
('lockcluster serve --join'); this command does it from outside.

By default the node joins as a learner (raft's non-voter, as etcd's
learners and Consul's new servers): it receives the log but neither votes
nor counts toward a commit, so a node with a long log to catch up does not
slow the cluster's commits. The leader promotes it to voter once it is
caught up: at most 1,000 entries behind the leader's commit index, and fit,
for three of the leader's probes in a row (about 3 s). 'lockcluster
members' shows it as a Learner, and how far behind it is, until then.

--voter adds it as a voter at once (the behaviour before learners); use it
only for a node whose log is current. --no-promote keeps it a learner until
'lockcluster promote ID'. A node that is already a voter stays one.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 0 || m.ID == "" || m.RaftAddr == "" {
				return &exitError{code: exitUsage, msg: usage}
			}
			if voter && (noPromote || cmd.Flags().Changed("learner")) {
				return &exitError{code: exitUsage, msg: "--voter adds a voter at once: it goes with neither --learner nor --no-promote\n" + usage}
			}
			return nil
		},
		RunE: g.withAdmin(true, func(ctx context.Context, a *lockcluster.Admin, _ []string) error {
			res, err := a.JoinWith(ctx, m, lockcluster.JoinOptions{Learner: learner && !voter, NoPromote: noPromote})
			if err != nil {
				return g.exit(err)
			}
			// Asked for a learner, got a voter: it was one already, or the
			// leader's release has no learners.
			var note string
			if learner && !voter && !res.Learner {
				note = "asked to join as a learner, the node is a voter: it was one already, or the leader runs a release without learners"
			}
			if g.output == "json" {
				out := map[string]any{"id": m.ID, "joined": true, "voters": res.Voters, "learner": res.Learner, "warning": res.Warning}
				if note != "" {
					out["note"] = note
				}
				return printJSON(os.Stdout, out)
			}
			switch {
			case res.Learner && noPromote:
				fmt.Printf("%s joined as a learner (%d voters); promote it once it has caught up: lockcluster promote %s\n", m.ID, res.Voters, m.ID)
			case res.Learner:
				fmt.Printf("%s joined as a learner (%d voters); the leader promotes it to voter once it has caught up (see lockcluster members)\n", m.ID, res.Voters)
			default:
				fmt.Printf("%s joined (%d voters)\n", m.ID, res.Voters)
			}
			if note != "" {
				fmt.Fprintln(os.Stderr, "note: "+note)
			}
			if res.Warning != "" {
				fmt.Fprintln(os.Stderr, "warning: "+res.Warning)
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&m.ID, "id", "", "the node's id")
	cmd.Flags().StringVar(&m.RaftAddr, "raft-addr", "", "the node's raft address")
	cmd.Flags().StringVar(&m.GRPCAddr, "grpc-addr", "", "the node's client API address (the leader probes it to judge a learner caught up)")
	cmd.Flags().StringVar(&m.HTTPAddr, "http-addr", "", "the node's HTTP address")
	cmd.Flags().BoolVar(&learner, "learner", true, "join as a learner, promoted to voter once caught up (the default)")
	cmd.Flags().BoolVar(&voter, "voter", false, "join as a voter at once")
	cmd.Flags().BoolVar(&noPromote, "no-promote", false, "join as a learner that only 'lockcluster promote' makes a voter")
	return cmd
}

func newPromote(g *globals) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "promote ID",
		Short: "Make a learner a voter",
		Long: `Make a learner (a node joined as one: lockcluster join) a voter. The leader
refuses, naming how far behind it is, a learner that is more than 1,000
entries behind its commit index, that does not answer its probes, or that
is unfit to serve: a voter that far behind could stall the cluster's
commits while it catches up. Wait for it ('lockcluster members' shows how
far behind it is), or --force. Promoting a voter changes nothing.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return &exitError{code: exitUsage, msg: "usage: lockcluster promote ID [--force]"}
			}
			return nil
		},
		RunE: g.withAdmin(true, func(ctx context.Context, a *lockcluster.Admin, args []string) error {
			res, err := a.Promote(ctx, args[0], lockcluster.PromoteOptions{Force: force})
			if err != nil {
				return g.exit(err)
			}
			if g.output == "json" {
				return printJSON(os.Stdout, map[string]any{"id": args[0], "promoted": !res.AlreadyVoter, "alreadyVoter": res.AlreadyVoter, "voters": res.Voters, "warning": res.Warning})
			}
			if res.AlreadyVoter {
				fmt.Printf("%s is a voter already (%d voters)\n", args[0], res.Voters)
			} else {
				fmt.Printf("%s promoted to voter (%d voters)\n", args[0], res.Voters)
			}
			if res.Warning != "" {
				fmt.Fprintln(os.Stderr, "warning: "+res.Warning)
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&force, "force", false, "promote however far behind the learner is")
	return cmd
}

func newLeave(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "leave ID",
		Short: "Remove a member (also a dead one) from the cluster",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return &exitError{code: exitUsage, msg: "usage: lockcluster leave ID"}
			}
			return nil
		},
		RunE: g.withAdmin(true, func(ctx context.Context, a *lockcluster.Admin, args []string) error {
			if err := a.Leave(ctx, args[0]); err != nil {
				return g.exit(err)
			}
			if g.output == "json" {
				return printJSON(os.Stdout, map[string]any{"id": args[0], "removed": true})
			}
			fmt.Printf("%s removed\n", args[0])
			return nil
		}),
	}
}

func newHealth(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "health",
		Short: "Exit 0 when the (first) endpoint serves: it is up and has a leader",
		Args:  cobra.NoArgs,
		RunE: g.withAdmin(true, func(ctx context.Context, a *lockcluster.Admin, _ []string) error {
			err := a.Health(ctx)
			if err != nil && errors.Is(err, lockcluster.ErrPermission) {
				return g.exit(err)
			}
			if g.output == "json" {
				st := map[string]any{"endpoint": g.endpoints()[0], "serving": err == nil}
				if err != nil {
					st["error"] = err.Error()
				}
				printJSON(os.Stdout, st)
			}
			if err != nil {
				if g.output == "json" {
					return &exitError{code: exitFailure}
				}
				return &exitError{code: exitFailure, msg: err.Error()}
			}
			if g.output != "json" {
				fmt.Println("serving")
			}
			return nil
		}),
	}
}

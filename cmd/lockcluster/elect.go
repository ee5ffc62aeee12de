package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockcluster/lockcluster"
)

// elect and observe are etcdctl's elect pair on an exclusive lock: the
// leader is the lock's holder, its value the holder session's label, which
// query shows.

func newElect(g *globals) *cobra.Command {
	var value string
	var grace, ttl, timeout time.Duration
	var waitChildren bool
	cmd := &cobra.Command{
		Use:   "elect NAME --value V [-- CMD [ARGS...]]",
		Short: "Campaign for leadership of NAME; run CMD while leader",
		Long: `Campaign for leadership of NAME, like 'etcdctl elect': candidates queue for
the exclusive lock NAME, in order; the holder leads. Its value (--value) is its
session's label, so 'lockcluster query' and 'lockcluster observe NAME' show it.

With CMD, the leader runs it as 'lockcluster lock' does (a job of its own,
process group and cgroup; stopped when leadership is lost, and by a guard
process at the session's jeopardy deadline if this process is stopped or
stuck; exit statuses as lock's). Without CMD,
the leader prints its value and holds leadership until interrupted.`,
		Example: `  lockcluster elect scheduler --value "$(hostname)" -- ./scheduler
  lockcluster observe scheduler`,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			if len(args) < 1 || (dash >= 0 && dash != 1) || (dash < 0 && len(args) != 1) || value == "" {
				return &exitError{code: exitUsage, msg: "usage: lockcluster elect NAME --value V [-- CMD [ARGS...]]"}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.checkOutput(); err != nil {
				return err
			}
			r := &lockRun{g: g, name: args[0], timeout: timeout, grace: grace, ttl: ttl, label: value, waitChildren: waitChildren, argv: args[1:]}
			if len(r.argv) == 0 {
				r.verbose = true // say when elected
			}
			return r.run()
		},
	}
	f := cmd.Flags()
	f.StringVar(&value, "value", "", "this candidate's value, shown to observers (required)")
	f.DurationVar(&timeout, "timeout", 0, "give up campaigning after this long (exit 73); 0: wait forever")
	f.DurationVar(&grace, "grace", 10*time.Second, "after SIGTERM, how long the job has before SIGKILL (at most --ttl/4 once leadership is lost or in jeopardy)")
	f.DurationVar(&ttl, "ttl", 10*time.Second, "session TTL: how long the cluster waits for a silent candidate")
	f.BoolVar(&waitChildren, "wait-children", false, "when CMD exits, wait for what it left running, still leading, instead of stopping it")
	return cmd
}

func newObserve(g *globals) *cobra.Command {
	var every time.Duration
	cmd := &cobra.Command{
		Use:   "observe NAME",
		Short: "Print the leader's value of NAME each time it changes",
		Long: `Print the value of NAME's leader (the label of the session holding the
exclusive lock NAME, see 'lockcluster elect') each time the leadership changes,
like 'etcdctl elect --listen'. Polls query every --interval; runs until
interrupted. -o json prints an object per change: name, value, token (the new
leader's fencing token), sessionId, acquiredAt.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return &exitError{code: exitUsage, msg: "usage: lockcluster observe NAME"}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.checkOutput(); err != nil {
				return err
			}
			if every <= 0 {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--interval %s: want a positive duration", every)}
			}
			name := args[0]
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()
			dctx, cancel := context.WithTimeout(ctx, g.timeout)
			c, err := g.dial(dctx, lockcluster.WithLabel("lockcluster observe"))
			cancel()
			if err != nil {
				return err
			}
			defer func() {
				cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				c.Close(cctx)
			}()
			var last uint64 // the token of the leader last printed
			for {
				qctx, cancel := context.WithTimeout(ctx, g.timeout)
				q, err := c.Query(qctx)
				cancel()
				if ctx.Err() != nil {
					return nil
				}
				if err != nil {
					return g.exit(err)
				}
				for _, h := range q.Held {
					if h.Name != name || h.Token == last {
						continue
					}
					last = h.Token
					if g.output == "json" {
						printJSONLine(map[string]any{"name": name, "value": h.Label, "token": h.Token, "sessionId": h.SessionID, "acquiredAt": h.AcquiredAt})
					} else {
						fmt.Println(h.Label)
					}
					break
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(every):
				}
			}
		},
	}
	cmd.Flags().DurationVar(&every, "interval", 250*time.Millisecond, "how often to look")
	return cmd
}

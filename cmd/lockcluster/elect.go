package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockcluster/lockcluster"
)

// elect and observe are etcdctl's elect pair on an exclusive lock: the
// leader is the lock's holder, its value the holder session's label, which
// query shows, and the name's record, which the leader writes once elected
// (record get NAME shows the last leader's value). observe watches the
// name and prints each grant's label: every leadership, in log order.

func newElect(g *globals) *cobra.Command {
	var value string
	var grace, ttl, timeout time.Duration
	var waitChildren bool
	cmd := &cobra.Command{
		Use:   "elect NAME --value V [-- CMD [ARGS...]]",
		Short: "Campaign for leadership of NAME; run CMD while leader",
		Long: `Campaign for leadership of NAME, like 'etcdctl elect': candidates queue for
the exclusive lock NAME, in order; the holder leads. Its value (--value) is its
session's label, so 'lockcluster query' and 'lockcluster observe NAME' show it,
and once elected the leader writes it as NAME's record ('lockcluster record get
NAME' shows the latest leader's value, also after it resigned).

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
			r := &lockRun{g: g, name: args[0], timeout: timeout, grace: grace, ttl: ttl, label: value, labelRecord: true, waitChildren: waitChildren, argv: args[1:]}
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
exclusive lock NAME, see 'lockcluster elect') at every change of leadership,
like 'etcdctl elect --listen': first the current leader's, if any, then each
new one's. It watches NAME, so it prints every leadership, however short, in
the order of the log, without a gap or a repeat across node failures (after
a gap too long for the node's history it starts again from the current
leader). Runs until interrupted. -o json prints an object per leadership:
name, value, token (the leader's fencing token), sessionId, acquiredAt.`,
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
			w, err := c.Watch(ctx, lockcluster.WatchOptions{Names: []string{name}})
			if err != nil {
				return g.exit(err)
			}
			defer w.Close()
			o := observer{g: g, name: name}
			for seen := false; ; seen = true {
				ev, err := w.Next(ctx)
				if ctx.Err() != nil {
					return nil
				}
				if !seen && errors.Is(err, lockcluster.ErrNotSupported) {
					// A cluster of a release without watch: poll query.
					return o.poll(ctx, c, every)
				}
				if err != nil {
					return g.exit(err)
				}
				o.event(ev)
			}
		},
	}
	cmd.Flags().DurationVar(&every, "interval", 250*time.Millisecond, "how often to poll query, against a cluster of a release without watch (which misses short leaderships)")
	return cmd
}

// poll prints each leader query shows, every interval: observe against a
// cluster without watch.
func (o *observer) poll(ctx context.Context, c *lockcluster.Client, every time.Duration) error {
	for {
		qctx, cancel := context.WithTimeout(ctx, o.g.timeout)
		q, err := c.Query(qctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return o.g.exit(err)
		}
		o.event(lockcluster.WatchEvent{Snapshot: &lockcluster.WatchSnapshot{Held: q.Held}})
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

// observer prints each leadership of name that a watch shows.
type observer struct {
	g    *globals
	name string
	last uint64 // the token of the leader last printed
}

func (o *observer) event(ev lockcluster.WatchEvent) {
	if s := ev.Snapshot; s != nil {
		for _, h := range s.Held {
			if h.Name == o.name && h.Mode == lockcluster.Exclusive.String() {
				o.leader(h.Label, h.Token, h.SessionID, h.AcquiredAt)
			}
		}
		return
	}
	for _, ch := range ev.Changes {
		if ch.Kind == lockcluster.ChangeGranted && ch.Mode == lockcluster.Exclusive.String() && slices.Contains(ch.Names, o.name) {
			o.leader(ch.Label, ch.Token, ch.SessionID, ev.Time)
		}
	}
}

func (o *observer) leader(value string, token, session uint64, at time.Time) {
	if token == o.last {
		return
	}
	o.last = token
	if o.g.output == "json" {
		printJSONLine(map[string]any{"name": o.name, "value": value, "token": token, "sessionId": session, "acquiredAt": at})
	} else {
		fmt.Println(value)
	}
}

package main

import (
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockcluster/lockcluster"
)

func newQuery(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "query",
		Aliases: []string{"locks"},
		Short:   "Show the namespace's held and pending locks",
		Long: `Show the namespace's held locks (in grant order) and pending requests (queue by
queue), as navigator.locks.query() does, then the records of those names. A
semaphore's mode shows its size: shared(max=N). -o json prints the spec's
LockManagerSnapshot: {"held": [...], "pending": [...]}, each entry with name,
mode and clientId, plus sessionId, requestId, label, token, times and
maxHolders; and "records" (as 'record get -o json' prints them) when any.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.checkOutput(); err != nil {
				return err
			}
			ctx, cancel := g.ctx()
			defer cancel()
			c, err := g.dial(ctx, lockcluster.WithLabel("lockcluster query"))
			if err != nil {
				return err
			}
			defer c.Close(ctx)
			q, err := c.Query(ctx)
			if err != nil {
				return g.exit(err)
			}
			if g.output == "json" {
				out := map[string]any{"held": q.Held, "pending": q.Pending}
				if len(q.Records) > 0 {
					recs := make([]map[string]any, len(q.Records))
					for i, r := range q.Records {
						recs[i] = recordJSON(r)
					}
					out["records"] = recs
				}
				return printJSON(os.Stdout, out)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "STATE\tNAME\tMODE\tCLIENT\tLABEL\tSESSION\tREQUEST\tTOKEN\tAGE")
			now := time.Now()
			row := func(state string, l lockcluster.LockInfo, since time.Time) {
				token, age := "-", "-"
				if l.Token != 0 {
					token = fmt.Sprint(l.Token)
				}
				if !since.IsZero() {
					age = now.Sub(since).Round(time.Millisecond).String()
				}
				mode := l.Mode
				if l.MaxHolders > 0 {
					mode = fmt.Sprintf("%s(max=%d)", mode, l.MaxHolders)
				}
				fmt.Fprintf(w, "%s\t%q\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", state, l.Name, mode, l.ClientID, l.Label, l.SessionID, l.RequestID, token, age)
			}
			for _, l := range q.Held {
				row("held", l, l.AcquiredAt)
			}
			for _, l := range q.Pending {
				row("pending", l, l.RequestedAt)
			}
			if err := w.Flush(); err != nil || len(q.Records) == 0 {
				return err
			}
			fmt.Fprintln(w)
			fmt.Fprintln(w, "RECORD\tVALUE\tTOKEN\tINDEX\tWRITTEN")
			for _, r := range q.Records {
				v := string(r.Value)
				if len(v) > 40 {
					v = v[:37] + "..."
				}
				fmt.Fprintf(w, "%q\t%q\t%d\t%d\t%s\n", r.Name, v, r.Token, r.Index, r.WrittenAt.Local().Format(time.RFC3339))
			}
			return w.Flush()
		},
	}
}

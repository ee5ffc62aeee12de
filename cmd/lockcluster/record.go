package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/lockcluster/lockcluster"
)

// record get|set|delete: a name's record (SPEC §12) from the command line.
// A write takes the name exclusively, as any holder must, and releases it
// in the same entry as the write.

func newRecord(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "record",
		Short: "Read, write or delete the record a name carries",
		Long: `A name may carry a record: a byte string that only the name's exclusive holder
writes, fenced by its grant's token, and that stays until a holder deletes it.
Every grant carries the records of its names, so a new holder sees what its
predecessor left.

'record get NAME' prints the value (and a newline); a name without a record
prints nothing and exits 0, as 'etcdctl get' does for a missing key (-o json
says "found": false). 'record set NAME VALUE' and 'record delete NAME' wait for
the lock NAME (exclusive; --timeout bounds the wait, exit 73), then write or
delete the record and release the lock in one entry.`,
		Example: `  lockcluster record set deploy/version v1.4.2
  lockcluster record get deploy/version
  lockcluster record delete deploy/version`,
	}
	cmd.AddCommand(newRecordGet(g), newRecordWrite(g, false), newRecordWrite(g, true))
	return cmd
}

func newRecordGet(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Print a name's record",
		Long: `Print the value of NAME's record and a newline; nothing, exit 0, when NAME has
none. The read is linearizable. -o json prints {"name", "found", "value",
"token", "writtenAt", "index"} (value as a string; valueBase64 instead when it
is not UTF-8).`,
		Args: exactArgs(1, "usage: lockcluster record get NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.checkOutput(); err != nil {
				return err
			}
			ctx, cancel := g.ctx()
			defer cancel()
			c, err := g.dial(ctx, lockcluster.WithLabel("lockcluster record get"))
			if err != nil {
				return err
			}
			defer c.Close(ctx)
			rec, ok, err := c.Record(ctx, args[0])
			if err != nil {
				return g.exit(err)
			}
			if g.output == "json" {
				if !ok {
					return printJSON(os.Stdout, map[string]any{"name": args[0], "found": false})
				}
				return printJSON(os.Stdout, recordJSON(rec))
			}
			if ok {
				os.Stdout.Write(append(rec.Value, '\n'))
			}
			return nil
		},
	}
}

func newRecordWrite(g *globals, del bool) *cobra.Command {
	var timeout, ttl time.Duration
	use, short, usage := "set NAME VALUE", "Take NAME's lock, write its record and release it in one entry", "usage: lockcluster record set NAME VALUE"
	nargs := 2
	if del {
		use, short, usage = "delete NAME", "Take NAME's lock, delete its record and release it in one entry", "usage: lockcluster record delete NAME"
		nargs = 1
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + `: waits for the exclusive lock NAME
behind its current holder and queue (--timeout bounds the wait: exit 73), then
writes (or deletes) the record fenced by the grant's token and releases the lock
in the same entry, so that the write and the release happen together or not at
all. -o json prints the record written.`,
		Args: exactArgs(nargs, usage),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.checkOutput(); err != nil {
				return err
			}
			name := args[0]
			dctx, cancel := g.ctx()
			defer cancel()
			c, err := g.dial(dctx, lockcluster.WithLabel("lockcluster record"), lockcluster.WithTTL(ttl))
			if err != nil {
				return err
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				c.Close(ctx)
			}()
			wait := context.Background()
			if timeout > 0 {
				var cancel context.CancelFunc
				wait, cancel = context.WithTimeout(wait, timeout)
				defer cancel()
			}
			l, err := c.Acquire(wait, name, lockcluster.Options{})
			if err != nil {
				if timeout > 0 && errors.Is(wait.Err(), context.DeadlineExceeded) {
					return &exitError{code: exitTimeout, msg: fmt.Sprintf("lock %q was not granted within --timeout %s", name, timeout)}
				}
				return g.exit(err)
			}
			wctx, wcancel := g.ctx()
			defer wcancel()
			if del {
				if err := l.ReleaseDeletingRecord(wctx, name); err != nil {
					return g.exit(fmt.Errorf("deleting the record of %q: %w", name, err))
				}
				if g.output == "json" {
					return printJSON(os.Stdout, map[string]any{"name": name, "deleted": true, "token": l.Token()})
				}
				return nil
			}
			rec, err := l.ReleaseWithRecord(wctx, name, []byte(args[1]))
			if err != nil {
				return g.exit(fmt.Errorf("writing the record of %q: %w", name, err))
			}
			if g.output == "json" {
				return printJSON(os.Stdout, recordJSON(rec))
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "how long to wait for the lock (exit 73); 0: wait forever")
	cmd.Flags().DurationVar(&ttl, "ttl", 10*time.Second, "session TTL")
	return cmd
}

// recordJSON is a record as the CLI prints it: the value as a string when
// it is UTF-8, else base64 (valueBase64).
func recordJSON(r lockcluster.Record) map[string]any {
	m := map[string]any{"name": r.Name, "found": true, "token": r.Token, "writtenAt": r.WrittenAt, "index": r.Index}
	if utf8.Valid(r.Value) {
		m["value"] = string(r.Value)
	} else {
		m["valueBase64"] = base64.StdEncoding.EncodeToString(r.Value)
	}
	return m
}

// exactArgs is cobra.ExactArgs with a usage error (exit 2).
func exactArgs(n int, usage string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return &exitError{code: exitUsage, msg: usage}
		}
		return nil
	}
}

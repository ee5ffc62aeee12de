package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockcluster/lockcluster"
)

// Exit statuses besides a child's own (lock) and 0.
const (
	exitFailure     = 1  // any other failure
	exitUsage       = 2  // bad flags or arguments
	exitLost        = 74 // lock: the lock was lost while the command ran
	exitNotAvail    = 75 // lock --if-available: the lock is taken
	exitTimeout     = 73 // lock --timeout: the lock was not granted in time
	exitUnavailable = 69 // no endpoint answered
)

type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// globals are the flags every client command shares.
type globals struct {
	addr      string
	namespace string
	output    string
	timeout   time.Duration
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "lockcluster",
		Short: "A distributed lock service with the Web Locks API's semantics",
		Long: `lockcluster is a distributed lock service: named locks, exclusive and shared
modes, FIFO queues, ifAvailable, steal, abort and query, with the semantics of
the browser's Web Locks API, replicated with Raft.

Start a local 3-node cluster with 'lockcluster dev', then run a command under a
lock with 'lockcluster lock NAME -- CMD'.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.addr, "addr", envOr("LOCKCLUSTER_ADDR", "127.0.0.1:7700"), "cluster endpoints, comma-separated (env LOCKCLUSTER_ADDR)")
	pf.StringVarP(&g.namespace, "namespace", "n", envOr("LOCKCLUSTER_NAMESPACE", "default"), "namespace (env LOCKCLUSTER_NAMESPACE)")
	pf.StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	pf.DurationVar(&g.timeout, "request-timeout", 10*time.Second, "how long a cluster call may take")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{code: exitUsage, msg: err.Error() + "\n(see '" + c.CommandPath() + " --help')"}
	})
	root.AddCommand(newServe(), newDev(), newLock(g), newQuery(g), newMembers(g), newStatus(g), newJoin(g), newLeave(g), newHealth(g))
	return root
}

func (g *globals) endpoints() []string { return strings.Split(g.addr, ",") }

func (g *globals) checkOutput() error {
	if g.output != "table" && g.output != "json" {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("--output %q is not table or json", g.output)}
	}
	return nil
}

func (g *globals) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), g.timeout)
}

func (g *globals) admin() (*lockcluster.Admin, error) {
	return lockcluster.DialAdmin(g.endpoints())
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

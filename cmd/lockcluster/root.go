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
	exitNoPerm      = 77 // a credential was refused (EX_NOPERM)
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
	token     string
	tls       lockcluster.TLSFiles
	files     clientFiles // --config and --token-file (clientconfig.go)
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
lock with 'lockcluster lock NAME -- CMD'.

The client commands take their endpoints, namespace, TLS files and token from,
first found: the flags, the client config file (--config), the environment
(LOCKCLUSTER_ADDR, ...), the defaults.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	setVersion(root)
	pf := root.PersistentFlags()
	pf.StringVar(&g.addr, "addr", envOr("LOCKCLUSTER_ADDR", "127.0.0.1:7700"), "cluster endpoints, comma-separated (env LOCKCLUSTER_ADDR)")
	pf.StringVarP(&g.namespace, "namespace", "n", envOr("LOCKCLUSTER_NAMESPACE", "default"), "namespace (env LOCKCLUSTER_NAMESPACE)")
	pf.StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	pf.DurationVar(&g.timeout, "request-timeout", 10*time.Second, "how long a cluster call may take")
	// These default to their environment variables at use, so that --help
	// never prints a token.
	pf.StringVar(&g.token, "token", "", "bearer token for the namespace, or an admin token (env LOCKCLUSTER_TOKEN)")
	pf.StringVar(&g.tls.CA, "cacert", "", "CA certificate to verify the nodes with: connect over TLS (env LOCKCLUSTER_CACERT)")
	pf.StringVar(&g.tls.Cert, "cert", "", "client certificate, for mutual TLS (env LOCKCLUSTER_CERT)")
	pf.StringVar(&g.tls.Key, "key", "", "client certificate's key (env LOCKCLUSTER_KEY)")
	g.clientConfigFlags(root)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{code: exitUsage, msg: err.Error() + "\n(see '" + c.CommandPath() + " --help')"}
	})
	root.AddCommand(newServe(), newDev(), newLock(g), newQuery(g), newMembers(g), newStatus(g), newJoin(g), newLeave(g), newHealth(g), newTLS(), newBench(g), newVersion(g), newElect(g), newObserve(g), newReap(), newSnapshot(g), newRecover(g))
	root.AddCommand(newPromote(g), newRecord(g), newSlots(g), newPlacement(g))
	root.AddCommand(newMan()) // man.go: the man pages scripts/release ships
	return root
}

// usesTLS reports whether any TLS file is given: the command then
// connects over TLS.
func (g *globals) usesTLS() bool { return g.tls != (lockcluster.TLSFiles{}) }

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

// options are the client options every command uses: credentials and TLS.
func (g *globals) options() ([]lockcluster.Option, error) {
	for _, v := range []struct {
		p   *string
		env string
	}{{&g.token, "LOCKCLUSTER_TOKEN"}, {&g.tls.CA, "LOCKCLUSTER_CACERT"}, {&g.tls.Cert, "LOCKCLUSTER_CERT"}, {&g.tls.Key, "LOCKCLUSTER_KEY"}} {
		if *v.p == "" {
			*v.p = os.Getenv(v.env)
		}
	}
	var opts []lockcluster.Option
	if g.usesTLS() {
		cfg, err := g.tls.Config()
		if err != nil {
			return nil, &exitError{code: exitUsage, msg: err.Error()}
		}
		opts = append(opts, lockcluster.WithTLS(cfg))
	}
	if g.token != "" {
		opts = append(opts, lockcluster.WithToken(g.token))
	}
	return opts, nil
}

// dial opens a session in the namespace with the global options and more.
func (g *globals) dial(ctx context.Context, more ...lockcluster.Option) (*lockcluster.Client, error) {
	opts, err := g.options()
	if err != nil {
		return nil, err
	}
	opts = append(opts, lockcluster.WithNamespace(g.namespace))
	c, err := lockcluster.Dial(ctx, g.endpoints(), append(opts, more...)...)
	if err != nil {
		return nil, g.exit(err)
	}
	return c, nil
}

// admin connects for cluster operations to the given endpoints, or to
// --addr's.
func (g *globals) admin(endpoints ...string) (*lockcluster.Admin, error) {
	opts, err := g.options()
	if err != nil {
		return nil, err
	}
	if len(endpoints) == 0 {
		endpoints = g.endpoints()
	}
	return lockcluster.DialAdmin(endpoints, opts...)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// say prints one of a command's own messages on stderr: a line of text, or
// with -o json an object with the event, the text and details.
func (g *globals) say(event, text string, details map[string]any) {
	if g.output != "json" {
		fmt.Fprintln(os.Stderr, "lockcluster:", text)
		return
	}
	m := map[string]any{"event": event, "message": text}
	for k, v := range details {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	fmt.Fprintf(os.Stderr, "%s\n", b)
}

// printJSONLine prints v as one line of JSON on stdout (a stream of objects).
func printJSONLine(v any) {
	b, _ := json.Marshal(v)
	fmt.Printf("%s\n", b)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockcluster/lockcluster"
)

func newLock(g *globals) *cobra.Command {
	var mode string
	var ifAvailable, steal bool
	var timeout, grace, ttl time.Duration
	var scope []string
	var verbose bool
	cmd := &cobra.Command{
		Use:   "lock NAME [flags] -- CMD [ARGS...]",
		Short: "Run a command while holding a lock",
		Long: `Run CMD while holding the lock NAME, like 'etcdctl lock' or 'consul lock'.
CMD sees LOCKCLUSTER_LOCK_NAME and LOCKCLUSTER_LOCK_TOKEN (the fencing token:
pass it to whatever the lock protects, so that it can refuse a stale holder).
The lock is released when CMD exits.

CMD runs in a process group of its own: if the lock is lost while CMD runs
(stolen, or the session lost), the whole group (a shell pipeline and what it
started in the background) gets SIGTERM, then SIGKILL after --grace. If
'lockcluster lock' itself dies (kill -9), the group is killed at once.
HUP, INT, QUIT, TERM, USR1, USR2, WINCH and ALRM are passed on to the group;
before the grant, HUP, INT, QUIT and TERM abort the request.

--timeout bounds everything before the grant: reaching a node, opening the
session and waiting in the queue. When no endpoint accepts a connection
within 2s the command exits 69 at once.

Exit status: CMD's own; 75 when --if-available finds the lock taken; 74 when
the lock was lost while CMD ran; 73 when --timeout passed before the grant;
69 when no endpoint answered; 77 when a credential was refused; 2 for bad
usage; 1 for other errors.`,
		Example: `  lockcluster lock backup -- ./backup.sh
  lockcluster lock report --mode shared -- ./read-report.sh
  lockcluster lock deploy --if-available -- make deploy || echo "someone else is deploying"`,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			if len(args) < 1 || dash != 1 || len(args) < 2 {
				return &exitError{code: exitUsage, msg: "usage: lockcluster lock NAME [flags] -- CMD [ARGS...]"}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := lockcluster.Options{IfAvailable: ifAvailable, Steal: steal, Scope: scope}
			switch mode {
			case "exclusive":
			case "shared":
				opts.Mode = lockcluster.Shared
			default:
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--mode %q is not exclusive or shared", mode)}
			}
			if err := g.checkOutput(); err != nil {
				return err
			}
			r := &lockRun{g: g, name: args[0], opts: opts, timeout: timeout, grace: grace, ttl: ttl, verbose: verbose, argv: args[1:]}
			return r.run()
		},
	}
	f := cmd.Flags()
	f.StringVar(&mode, "mode", "exclusive", "exclusive or shared")
	f.BoolVar(&ifAvailable, "if-available", false, "do not wait: exit 75 if the lock is taken")
	f.BoolVar(&steal, "steal", false, "take the lock from its holders (they lose it)")
	f.DurationVar(&timeout, "timeout", 0, "deadline for reaching the cluster, opening a session and the grant (exit 73); 0: wait forever")
	f.BoolVarP(&verbose, "verbose", "v", false, "say who holds the lock while waiting, and the grant")
	f.DurationVar(&grace, "grace", 10*time.Second, "after SIGTERM, how long CMD has before SIGKILL")
	f.DurationVar(&ttl, "ttl", 10*time.Second, "session TTL: how long the cluster waits for a silent client")
	f.StringSliceVar(&scope, "scope", nil, "more names to lock together with NAME, atomically")
	return cmd
}

// lockRun is one 'lockcluster lock': what it was asked to do.
type lockRun struct {
	g       *globals
	name    string
	opts    lockcluster.Options
	timeout time.Duration // the whole command's deadline; 0: none
	grace   time.Duration
	ttl     time.Duration
	verbose bool
	label   string   // the session's label (elect: the candidate's value); "": host:pid
	argv    []string // empty: hold the lock until a signal (elect without CMD)
}

// unreachableAfter is how long 'lock' tries to reach any endpoint before it
// exits 69, as etcdctl's dial timeout.
const unreachableAfter = 2 * time.Second

func (r *lockRun) run() error {
	g, name := r.g, r.name
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, forwarded...)
	defer signal.Stop(sig)

	// A signal while waiting for the lock aborts the request; once the
	// lock is held, signals go to the command.
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	granted := make(chan struct{})
	interrupted := make(chan os.Signal, 1)
	go func() {
		for {
			select {
			case s := <-sig:
				if !aborting(s) {
					continue // USR1, WINCH...: nobody to pass them to yet
				}
				interrupted <- s
				cancelBase()
				return
			case <-granted:
				return
			}
		}
	}()
	stopped := func() error {
		select {
		case s := <-interrupted:
			return &exitError{code: 128 + int(s.(syscall.Signal)), msg: fmt.Sprintf("interrupted (%s) while waiting for lock %q", s, name)}
		default:
			return nil
		}
	}
	// --timeout bounds everything before the grant: reaching a node,
	// opening the session, waiting in the queue.
	whole := base
	if r.timeout > 0 {
		var cancel context.CancelFunc
		whole, cancel = context.WithTimeout(base, r.timeout)
		defer cancel()
	}
	timedOut := func(what string) error {
		return &exitError{code: exitTimeout, msg: fmt.Sprintf("lock %q was not granted within --timeout %s (%s)", name, r.timeout, what)}
	}
	if err := reachable(whole, g.endpoints(), unreachableAfter); err != nil {
		if e := stopped(); e != nil {
			return e
		}
		if r.timeout > 0 && whole.Err() != nil {
			return timedOut("no endpoint answered")
		}
		return &exitError{code: exitUnavailable, msg: err.Error()}
	}
	dctx := whole
	if r.timeout == 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(base, g.timeout)
		defer cancel()
	}
	dopts := []lockcluster.Option{lockcluster.WithTTL(r.ttl)}
	if r.label != "" {
		dopts = append(dopts, lockcluster.WithLabel(r.label))
	}
	c, err := g.dial(dctx, dopts...)
	if err != nil {
		if e := stopped(); e != nil {
			return e
		}
		if r.timeout > 0 && whole.Err() != nil {
			return timedOut(fmt.Sprintf("no session could be opened: %v", err))
		}
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.Close(ctx)
	}()
	if r.verbose {
		r.opts.OnQueued = func() { r.sayHolders(whole, c) }
	}
	l, err := c.Acquire(whole, name, r.opts)
	close(granted)
	if e := stopped(); e != nil {
		if l != nil {
			l.Release(context.Background())
		}
		return e
	}
	switch {
	case errors.Is(err, lockcluster.ErrNotAvailable):
		return &exitError{code: exitNotAvail, msg: fmt.Sprintf("lock %q is taken (--if-available)", name)}
	case err != nil && r.timeout > 0 && errors.Is(whole.Err(), context.DeadlineExceeded):
		return timedOut("still queued")
	case err != nil:
		return g.exit(err)
	}
	if r.verbose {
		g.say("granted", fmt.Sprintf("lock %q granted, token %d", name, l.Token()), map[string]any{"name": name, "token": l.Token()})
	}
	var code int
	if len(r.argv) == 0 {
		err = r.hold(l, sig)
	} else {
		code, err = r.runChild(l, sig)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	if rerr := l.Release(rctx); rerr != nil && err == nil {
		if errors.Is(rerr, lockcluster.ErrSessionLost) {
			return &exitError{code: exitLost, msg: fmt.Sprintf("lock %q was lost before the command ended: %v", name, rerr)}
		}
		g.say("release-failed", fmt.Sprintf("releasing lock %q: %v", name, rerr), map[string]any{"name": name, "error": rerr.Error()})
	}
	if err != nil {
		return err
	}
	if code != 0 {
		return &exitError{code: code}
	}
	return nil
}

// sayHolders tells who holds what the queued request waits for.
func (r *lockRun) sayHolders(ctx context.Context, c *lockcluster.Client) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	q, err := c.Query(qctx)
	if err != nil {
		r.g.say("queued", fmt.Sprintf("waiting for lock %q (who holds it: %v)", r.name, err), map[string]any{"name": r.name, "error": err.Error()})
		return
	}
	wanted := map[string]bool{r.name: true}
	for _, n := range r.opts.Scope {
		wanted[n] = true
	}
	now := time.Now()
	said := false
	for _, h := range q.Held {
		if !wanted[h.Name] {
			continue
		}
		said = true
		label := h.Label
		if label == "" {
			label = h.ClientID
		}
		r.g.say("queued", fmt.Sprintf("waiting for lock %q: held (%s) by %s, session %d, since %s (%s ago), token %d",
			h.Name, h.Mode, label, h.SessionID, h.AcquiredAt.Local().Format(time.RFC3339), now.Sub(h.AcquiredAt).Round(time.Second), h.Token),
			map[string]any{"name": h.Name, "holder": map[string]any{"label": h.Label, "clientId": h.ClientID, "sessionId": h.SessionID,
				"mode": h.Mode, "token": h.Token, "acquiredAt": h.AcquiredAt}})
	}
	if !said {
		ahead := 0
		for _, p := range q.Pending {
			if wanted[p.Name] && p.SessionID != c.SessionID() {
				ahead++
			}
		}
		r.g.say("queued", fmt.Sprintf("waiting for lock %q: queued behind %d request(s)", r.name, ahead), map[string]any{"name": r.name, "ahead": ahead})
	}
}

// reachable returns nil as soon as any endpoint accepts a TCP connection,
// and an error naming each endpoint's failure if none does within d.
func reachable(ctx context.Context, endpoints []string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	type result struct {
		addr string
		err  error
	}
	results := make(chan result, len(endpoints))
	for _, e := range endpoints {
		e = strings.TrimSpace(e)
		go func() {
			var last error
			for {
				var dl net.Dialer
				conn, err := dl.DialContext(ctx, "tcp", e)
				if err == nil {
					conn.Close()
					results <- result{e, nil}
					return
				}
				last = err
				select {
				case <-ctx.Done():
					results <- result{e, last}
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}
	var errs []string
	for range endpoints {
		r := <-results
		if r.err == nil {
			return nil
		}
		errs = append(errs, r.err.Error())
	}
	return fmt.Errorf("no endpoint answered within %s: %s", d, strings.Join(errs, "; "))
}

// hold keeps l until a signal (then releases it: exit 0) or its loss
// (exit 74).
func (r *lockRun) hold(l *lockcluster.Lock, sig <-chan os.Signal) error {
	if r.label != "" {
		if r.g.output == "json" {
			printJSONLine(map[string]any{"name": r.name, "value": r.label, "token": l.Token()})
		} else {
			fmt.Println(r.label)
		}
	}
	for {
		select {
		case s := <-sig:
			if aborting(s) {
				return nil
			}
		case <-l.Done():
			lost := context.Cause(l.Context())
			return &exitError{code: exitLost, msg: fmt.Sprintf("lock %q lost (%v)", l.Name(), lost)}
		}
	}
}

// runChild runs the command while l is held. It returns the command's exit
// status, or an error with status 74 when the lock was lost and the
// command's process group was stopped.
func (r *lockRun) runChild(l *lockcluster.Lock, sig <-chan os.Signal) (int, error) {
	env := append(os.Environ(), "LOCKCLUSTER_LOCK_NAME="+strings.Join(l.Names(), ","), "LOCKCLUSTER_LOCK_TOKEN="+strconv.FormatUint(l.Token(), 10))
	grp, err := startGroup(r.argv, env)
	if err != nil {
		return 0, &exitError{code: 127, msg: fmt.Sprintf("cannot run %s: %v", r.argv[0], err)}
	}
	defer grp.finish()
	var lost error
	var kill *time.Timer
	lostCh := l.Done()
	for {
		select {
		case err := <-grp.done:
			if lost != nil {
				// Whatever the command left running goes too: the
				// lock is gone.
				kill.Stop()
				grp.signal(syscall.SIGKILL)
				return 0, &exitError{code: exitLost, msg: fmt.Sprintf("lock %q lost while the command ran (%v); the command was stopped", l.Name(), lost)}
			}
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
					return 128 + int(st.Signal()), nil
				}
				return ee.ExitCode(), nil
			}
			return 0, err
		case s := <-sig:
			grp.signal(s.(syscall.Signal)) // we exit with the command
		case <-lostCh:
			lostCh = nil
			lost = context.Cause(l.Context())
			r.g.say("lost", fmt.Sprintf("lock %q lost (%v): stopping the command", l.Name(), lost), map[string]any{"name": l.Name(), "error": lost.Error()})
			grp.signal(syscall.SIGTERM)
			kill = time.AfterFunc(r.grace, func() { grp.signal(syscall.SIGKILL) })
		}
	}
}

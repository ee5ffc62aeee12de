package main

import (
	"context"
	"errors"
	"fmt"
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
	cmd := &cobra.Command{
		Use:   "lock NAME [flags] -- CMD [ARGS...]",
		Short: "Run a command while holding a lock",
		Long: `Run CMD while holding the lock NAME, like 'etcdctl lock' or 'consul lock'.
CMD sees LOCKCLUSTER_LOCK_NAME and LOCKCLUSTER_LOCK_TOKEN (the fencing token:
pass it to whatever the lock protects, so that it can refuse a stale holder).
The lock is released when CMD exits. If the lock is lost while CMD runs
(stolen, or the session lost), CMD gets SIGTERM, then SIGKILL after --grace.

Exit status: CMD's own; 75 when --if-available finds the lock taken; 74 when
the lock was lost while CMD ran; 73 when --timeout passed before the grant;
69 when no endpoint answered; 2 for bad usage; 1 for other errors.`,
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
			return runLocked(g, args[0], opts, timeout, grace, ttl, args[1:])
		},
	}
	f := cmd.Flags()
	f.StringVar(&mode, "mode", "exclusive", "exclusive or shared")
	f.BoolVar(&ifAvailable, "if-available", false, "do not wait: exit 75 if the lock is taken")
	f.BoolVar(&steal, "steal", false, "take the lock from its holders (they lose it)")
	f.DurationVar(&timeout, "timeout", 0, "give up waiting for the lock after this long (exit 73); 0: wait forever")
	f.DurationVar(&grace, "grace", 10*time.Second, "after SIGTERM, how long CMD has before SIGKILL")
	f.DurationVar(&ttl, "ttl", 10*time.Second, "session TTL: how long the cluster waits for a silent client")
	f.StringSliceVar(&scope, "scope", nil, "more names to lock together with NAME, atomically")
	return cmd
}

func runLocked(g *globals, name string, opts lockcluster.Options, timeout, grace, ttl time.Duration, argv []string) error {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sig)

	// A signal while waiting for the lock aborts the request; once the
	// lock is held, signals go to the command.
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	granted := make(chan struct{})
	interrupted := make(chan os.Signal, 1)
	go func() {
		select {
		case s := <-sig:
			interrupted <- s
			cancelBase()
		case <-granted:
		}
	}()
	dctx, cancel := context.WithTimeout(base, g.timeout)
	c, err := g.dial(dctx, lockcluster.WithTTL(ttl))
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.Close(ctx)
	}()
	wait := base
	if timeout > 0 {
		var cancel context.CancelFunc
		wait, cancel = context.WithTimeout(base, timeout)
		defer cancel()
	}
	l, err := c.Acquire(wait, name, opts)
	close(granted)
	select {
	case s := <-interrupted:
		if l != nil {
			l.Release(context.Background())
		}
		return &exitError{code: 128 + int(s.(syscall.Signal)), msg: fmt.Sprintf("interrupted (%s) while waiting for lock %q", s, name)}
	default:
	}
	switch {
	case errors.Is(err, lockcluster.ErrNotAvailable):
		return &exitError{code: exitNotAvail, msg: fmt.Sprintf("lock %q is taken (--if-available)", name)}
	case err != nil && errors.Is(err, context.DeadlineExceeded) && errors.Is(err, lockcluster.ErrAborted):
		return &exitError{code: exitTimeout, msg: fmt.Sprintf("lock %q was not granted within --timeout %s", name, timeout)}
	case err != nil:
		return clientExit(err)
	}
	code, err := runChild(l, grace, argv, sig)
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	if rerr := l.Release(rctx); rerr != nil && err == nil {
		if errors.Is(rerr, lockcluster.ErrSessionLost) {
			return &exitError{code: exitLost, msg: fmt.Sprintf("lock %q was lost before the command ended: %v", name, rerr)}
		}
		fmt.Fprintf(os.Stderr, "lockcluster: releasing lock %q: %v\n", name, rerr)
	}
	if err != nil {
		return err
	}
	if code != 0 {
		return &exitError{code: code}
	}
	return nil
}

// runChild runs argv while l is held. It returns the child's exit status,
// or an error with status 74 when the lock was lost and the child stopped.
func runChild(l *lockcluster.Lock, grace time.Duration, argv []string, sig <-chan os.Signal) (int, error) {
	child := exec.Command(argv[0], argv[1:]...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	child.Env = append(os.Environ(), "LOCKCLUSTER_LOCK_NAME="+strings.Join(l.Names(), ","), "LOCKCLUSTER_LOCK_TOKEN="+strconv.FormatUint(l.Token(), 10))
	if err := child.Start(); err != nil {
		return 0, &exitError{code: 127, msg: fmt.Sprintf("cannot run %s: %v", argv[0], err)}
	}
	done := make(chan error, 1)
	go func() { done <- child.Wait() }()
	var lost error
	lostCh := l.Done()
	for {
		select {
		case err := <-done:
			if lost != nil {
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
			child.Process.Signal(s) // pass ^C and TERM on; we exit with the child
		case <-lostCh:
			lostCh = nil
			if lost == nil {
				lost = context.Cause(l.Context())
				fmt.Fprintf(os.Stderr, "lockcluster: lock %q lost (%v): stopping the command\n", l.Name(), lost)
				child.Process.Signal(syscall.SIGTERM)
				go func() {
					time.Sleep(grace)
					child.Process.Kill()
				}()
			}
		}
	}
}

// clientExit maps a client error to an exit status and message.
func clientExit(err error) error {
	switch {
	case errors.Is(err, lockcluster.ErrUnavailable):
		return &exitError{code: exitUnavailable, msg: err.Error()}
	case errors.Is(err, lockcluster.ErrInvalid), errors.Is(err, lockcluster.ErrNotSupported):
		return &exitError{code: exitUsage, msg: err.Error()}
	}
	return &exitError{code: exitFailure, msg: err.Error()}
}

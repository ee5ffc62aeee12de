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
	var ifAvailable, steal, waitChildren bool
	var timeout, grace, ttl time.Duration
	var scope []string
	var verbose bool
	var maxHolders int
	var oncePer time.Duration
	cmd := &cobra.Command{
		Use:   "lock NAME [flags] -- CMD [ARGS...]",
		Short: "Run a command while holding a lock",
		Long: `Run CMD while holding the lock NAME, like 'etcdctl lock' or 'consul lock'.
CMD sees LOCKCLUSTER_LOCK_NAME and LOCKCLUSTER_LOCK_TOKEN (the fencing token:
pass it to whatever the lock protects, so that it can refuse a stale holder).
The lock covers the whole job: CMD and everything it starts.

CMD runs in a process group of its own and, on Linux, in a cgroup of its own
where one can be made (a writable cgroup v2 hierarchy; elsewhere lockcluster
becomes the subreaper of CMD's descendants, and --verbose says so): a shell
pipeline, its background jobs and what they start with setsid are all part of
the job. When CMD exits, whatever of the job is left gets SIGTERM, then SIGKILL
after --grace, and the lock is released once all of it is gone; with
--wait-children lockcluster waits for it instead, holding the lock.

A guard process stops the job before anyone else can be granted the lock: it
holds the session's jeopardy deadline J (the send time of the last
acknowledged heartbeat plus --ttl; the cluster cannot expire the session
before J + TTL/10), and unless lockcluster hands it a later one in time -
lockcluster is stopped (kill -STOP), starved, stuck, or cut off from the
cluster - it sends the whole job SIGTERM at J minus the grace and SIGKILL at
J, the grace being --grace but at most a quarter of --ttl. lockcluster itself
does the same. If the lock is stolen, the job gets SIGTERM, then SIGKILL after
that grace. If 'lockcluster lock' dies (kill -9), the guard kills the job at
once. Only what stops the guard too (a paused virtual machine) escapes it:
pass the fencing token on, so that a stale holder can be refused.

--max-holders N (with --mode shared) makes NAME a semaphore: at most N
holders at once, the others queue in order. Every holder and waiter of NAME
must give the same N.

--once-per D runs CMD at most once per period D among all the machines that
run it (cron on several machines, each with its own clock): when CMD exits 0,
the release writes the record of NAME, {"done_at": T, "token": N}, T being the
leader's time of the write. A later holder whose grant (the leader's time in
the grant's entry) comes less than D after done_at releases the lock at once
and exits 75 without running CMD. Only the leader's clock, carried in the log
entries, decides: a machine's clock that is off changes nothing. Exclusive
mode only; usually with --if-available.

HUP, INT, QUIT, TERM, USR1, USR2, WINCH and ALRM are passed on to the group;
before the grant, HUP, INT, QUIT and TERM abort the request.

--timeout bounds everything before the grant: reaching a node, opening the
session and waiting in the queue. When no endpoint accepts a connection
within 2s the command exits 69 at once.

Exit status: CMD's own; 75 when --if-available finds the lock taken, or
--once-per finds the last run too recent (silently: --verbose says who holds
it, or when the last run was done); 74 when the lock was lost, or in
jeopardy, while the job ran (the job was stopped), or when --once-per could
not record a successful run; 73 when --timeout passed before the grant; 69
when no endpoint answered; 77 when a credential was refused; 2 for bad usage;
1 for other errors.`,
		Example: `  lockcluster lock backup -- ./backup.sh
  lockcluster lock report --mode shared -- ./read-report.sh
  lockcluster lock deploy --if-available -- make deploy || echo "someone else is deploying"
  lockcluster lock nightly-report --if-available --once-per 20h -- ./report.sh
  lockcluster lock encoders --mode shared --max-holders 4 -- ./encode.sh`,
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
			switch {
			case maxHolders < 0:
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--max-holders %d: want a positive number", maxHolders)}
			case maxHolders > 0 && opts.Mode != lockcluster.Shared:
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--max-holders %d needs --mode shared (a semaphore of N shared holders)", maxHolders)}
			case oncePer < 0:
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--once-per %s: want a positive duration", oncePer)}
			case oncePer > 0 && opts.Mode != lockcluster.Exclusive:
				return &exitError{code: exitUsage, msg: "--once-per needs --mode exclusive: only an exclusive holder writes the record of the last run"}
			}
			opts.MaxHolders = maxHolders
			if err := g.checkOutput(); err != nil {
				return err
			}
			r := &lockRun{g: g, name: args[0], opts: opts, timeout: timeout, grace: grace, ttl: ttl, verbose: verbose, waitChildren: waitChildren, argv: args[1:], oncePer: oncePer}
			return r.run()
		},
	}
	f := cmd.Flags()
	f.StringVar(&mode, "mode", "exclusive", "exclusive or shared")
	f.BoolVar(&ifAvailable, "if-available", false, "do not wait: exit 75, silently, if the lock is taken")
	f.BoolVar(&steal, "steal", false, "take the lock from its holders (they lose it)")
	f.DurationVar(&timeout, "timeout", 0, "deadline for reaching the cluster, opening a session and the grant (exit 73); 0: wait forever")
	f.BoolVarP(&verbose, "verbose", "v", false, "say who holds the lock (while waiting, or when --if-available finds it taken), the grant, and how the job is contained")
	f.DurationVar(&grace, "grace", 10*time.Second, "after SIGTERM, how long the job has before SIGKILL (at most --ttl/4 once the lock is lost or in jeopardy)")
	f.BoolVar(&waitChildren, "wait-children", false, "when CMD exits, wait for what it left running, holding the lock, instead of stopping it")
	f.DurationVar(&ttl, "ttl", 10*time.Second, "session TTL: how long the cluster waits for a silent client")
	f.StringSliceVar(&scope, "scope", nil, "more names to lock together with NAME, atomically")
	f.IntVar(&maxHolders, "max-holders", 0, "with --mode shared: at most N holders at once (a semaphore); 0: unlimited")
	f.DurationVar(&oncePer, "once-per", 0, "run CMD at most once per this period across all machines (exit 75 if the last successful run is more recent, by the leader's clock)")
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
	// waitChildren: when CMD exits, wait for the rest of its job instead
	// of stopping it.
	waitChildren bool
	label        string   // the session's label (elect: the candidate's value); "": host:pid
	argv         []string // empty: hold the lock until a signal (elect without CMD)
	feed         *deadlineFeed
	// oncePer: run CMD only if the last successful run (the record of
	// name) was done at least this long before the grant (onceper.go).
	oncePer time.Duration
	// labelRecord: write label as the record of name once granted (elect).
	labelRecord bool
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
	r.feed = newDeadlineFeed()
	dopts := []lockcluster.Option{lockcluster.WithTTL(r.ttl), lockcluster.WithDeadlineFunc(r.feed.set)}
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
		r.opts.OnQueued = func() { r.sayHolders(whole, c, "queued", fmt.Sprintf("waiting for lock %q", name)) }
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
		// Silent, as flock -n: a cron job that finds its last run still
		// going is not news (no mail every night).
		if r.verbose {
			r.sayHolders(base, c, "taken", fmt.Sprintf("lock %q is taken (--if-available)", name))
		}
		return &exitError{code: exitNotAvail}
	case err != nil && r.timeout > 0 && errors.Is(whole.Err(), context.DeadlineExceeded):
		return timedOut("still queued")
	case err != nil:
		return g.exit(err)
	}
	if r.verbose {
		g.say("granted", fmt.Sprintf("lock %q granted, token %d", name, l.Token()), map[string]any{"name": name, "token": l.Token()})
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	if r.oncePer > 0 {
		if skip := r.onceSkip(l); skip {
			l.Release(rctx) // an unconfirmed release goes on until Close
			return &exitError{code: exitNotAvail}
		}
	}
	if r.labelRecord {
		if _, err := l.SetRecord(rctx, name, []byte(r.label)); errors.Is(err, lockcluster.ErrNotHolder) {
			return &exitError{code: exitLost, msg: fmt.Sprintf("lock %q was lost before its value could be written: %v", name, err)}
		} else if err != nil {
			g.say("record-failed", fmt.Sprintf("writing the value of %q as its record: %v (observers see it as the leader's label)", name, err), map[string]any{"name": name, "error": err.Error()})
		}
	}
	var code int
	if len(r.argv) == 0 {
		err = r.hold(l, sig)
	} else {
		code, err = r.runChild(l, sig)
	}
	rctx, rcancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	if r.oncePer > 0 && err == nil && code == 0 {
		if rerr := r.recordRun(rctx, l); rerr != nil {
			l.Release(rctx)
			code := exitFailure
			if errors.Is(rerr, lockcluster.ErrNotHolder) || errors.Is(rerr, lockcluster.ErrSessionLost) {
				code = exitLost
			}
			return &exitError{code: code, msg: fmt.Sprintf("the command succeeded, but its run could not be recorded in the record of %q (another machine may run it again): %v", name, rerr)}
		}
		if r.verbose {
			g.say("recorded", fmt.Sprintf("lock %q: the run (token %d) is recorded and the lock released", name, l.Token()), map[string]any{"name": name, "token": l.Token()})
		}
		return nil
	}
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

// onceSkip decides --once-per's question for the grant l (onceper.go),
// saying why with --verbose.
func (r *lockRun) onceSkip(l *lockcluster.Lock) bool {
	rec, found := l.Record(r.name)
	skip, doneAt, note := onceDecision(rec, found, l.AcquiredAt(), r.oncePer)
	if note != "" {
		r.g.say("once-per", note, map[string]any{"name": r.name})
	}
	if !r.verbose {
		return skip
	}
	details := map[string]any{"name": r.name, "grantedAt": l.AcquiredAt(), "oncePer": r.oncePer.String()}
	if !doneAt.IsZero() {
		details["doneAt"] = doneAt
		details["lastToken"] = rec.Token
	}
	switch {
	case skip:
		r.g.say("done-recently", fmt.Sprintf("lock %q: the last run was done at %s, less than --once-per %s before this grant (%s): not running it again (by this machine's clock that was %s ago)",
			r.name, doneAt.Format(time.RFC3339Nano), r.oncePer, l.AcquiredAt().Format(time.RFC3339Nano), localNow().Sub(doneAt).Round(time.Millisecond)), details)
	case doneAt.IsZero():
		r.g.say("due", fmt.Sprintf("lock %q: no run recorded: running", r.name), details)
	default:
		r.g.say("due", fmt.Sprintf("lock %q: the last run was done at %s, at least --once-per %s before this grant (%s): running", r.name, doneAt.Format(time.RFC3339Nano), r.oncePer, l.AcquiredAt().Format(time.RFC3339Nano)), details)
	}
	return skip
}

// sayHolders tells who holds what the request wanted (event "queued":
// while it waits; "taken": --if-available found it held), each line
// starting with what.
func (r *lockRun) sayHolders(ctx context.Context, c *lockcluster.Client, event, what string) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	q, err := c.Query(qctx)
	if err != nil {
		r.g.say(event, fmt.Sprintf("%s (who holds it: %v)", what, err), map[string]any{"name": r.name, "error": err.Error()})
		return
	}
	wanted := map[string]bool{r.name: true}
	for _, n := range r.opts.Scope {
		wanted[n] = true
	}
	now := localNow()
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
		lead := what
		if h.Name != r.name {
			lead = fmt.Sprintf("%s (%q in its scope)", what, h.Name)
		}
		r.g.say(event, fmt.Sprintf("%s: held (%s) by %s, session %d, since %s (%s ago), token %d",
			lead, h.Mode, label, h.SessionID, h.AcquiredAt.Local().Format(time.RFC3339), now.Sub(h.AcquiredAt).Round(time.Second), h.Token),
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
		if event == "taken" {
			r.g.say(event, fmt.Sprintf("%s: no holder now, %d request(s) queued", what, ahead), map[string]any{"name": r.name, "ahead": ahead})
			return
		}
		r.g.say(event, fmt.Sprintf("%s: queued behind %d request(s)", what, ahead), map[string]any{"name": r.name, "ahead": ahead})
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

// stallEnv, set to a duration, makes runChild's control loop stop that long
// after the command started, for good, as a deadlock would: the session
// goes on (the client's goroutines heartbeat), but no deadline reaches the
// guard any more, which must then stop the job on its own. Tests only.
const stallEnv = "LOCKCLUSTER_TEST_STALL_AFTER"

// runChild runs the command while l is held, and returns once its whole
// job is gone: the command's exit status, or an error with status 74 when
// the lock was lost, or in jeopardy, and the job was stopped.
//
// When the job is stopped, and how (deadman.go): SIGTERM at the jeopardy
// deadline J minus stopGrace, SIGKILL at J; SIGTERM when the lock is lost
// otherwise (stolen), SIGKILL stopGrace later or at J if sooner. When the
// command exits while the lock is held, what it left running gets SIGTERM,
// then SIGKILL after --grace (or, with --wait-children, is waited for).
func (r *lockRun) runChild(l *lockcluster.Lock, sig <-chan os.Signal) (int, error) {
	env := append(os.Environ(), "LOCKCLUSTER_LOCK_NAME="+strings.Join(l.Names(), ","), "LOCKCLUSTER_LOCK_TOKEN="+strconv.FormatUint(l.Token(), 10))
	grace := stopGrace(r.grace, r.ttl)
	j := r.feed.get() // the jeopardy deadline
	sent := j         // the last deadline handed to the guard
	grp, err := startGroup(r.argv, env, groupConfig{
		cgroup:    os.Getenv(noCgroupEnv) == "",
		deadline:  j,
		stopGrace: grace,
		note: func(s string) {
			if r.verbose {
				r.g.say("no-cgroup", s, map[string]any{"name": l.Name()})
			}
		},
	})
	if err != nil {
		return 0, &exitError{code: 127, msg: fmt.Sprintf("cannot run %s: %v", r.argv[0], err)}
	}
	defer grp.finish()

	stopped := func() *time.Timer {
		t := time.NewTimer(time.Hour)
		t.Stop()
		return t
	}
	at := func(t *time.Timer, when time.Time) { t.Reset(max(time.Until(when), 0)) }
	// termT and killT: SIGTERM at J − grace, SIGKILL at J. stopT: SIGKILL
	// when a stop begun otherwise is due (a lost lock, leftovers).
	termT, killT, stopT := stopped(), stopped(), stopped()
	defer termT.Stop()
	defer killT.Stop()
	defer stopT.Stop()
	at(termT, j.Add(-grace))
	at(killT, j)
	var stopBy time.Time // when stopT fires; zero: not armed
	stopAt := func(when time.Time) {
		if stopBy.IsZero() || when.Before(stopBy) {
			stopBy = when
			at(stopT, when)
		}
	}
	var stall <-chan time.Time
	if d, err := time.ParseDuration(os.Getenv(stallEnv)); err == nil {
		stall = time.After(d)
	}
	// Once the command has exited, the job is looked at every pollEvery,
	// which grows from 5 ms to 200 ms: the kernel tells no one when the
	// last process of a cgroup or a process group is gone.
	poll, pollEvery := stopped(), 5*time.Millisecond
	defer poll.Stop()
	var polling <-chan time.Time

	var (
		status   int
		exited   bool
		lost     error  // why the lock ended, if it did
		stopping string // why the job is being stopped: "lost", "jeopardy"; "": it is not
	)
	// stop stops the job for why: SIGTERM now, SIGKILL by killBy.
	stop := func(why string, killBy time.Time) {
		if stopping == "" {
			stopping = why
			termT.Stop()
			grp.signalAll(syscall.SIGTERM)
		}
		stopAt(killBy)
	}
	// moved takes the latest deadline from the client and hands it to the
	// guard; until the job is being stopped, the timers follow it.
	moved := func() {
		if n := r.feed.get(); n.After(j) {
			j, sent = n, n
			grp.deadline(j, grace)
			if stopping == "" {
				at(termT, j.Add(-grace))
				at(killT, j)
			}
		}
	}
	lostCh := l.Done()
	onLost := func() {
		lostCh = nil
		lost = context.Cause(l.Context())
		if stopping == "" {
			r.g.say("lost", fmt.Sprintf("lock %q lost (%v): stopping the job", l.Name(), lost), map[string]any{"name": l.Name(), "error": lost.Error()})
		}
		stop("lost", minTime(time.Now().Add(grace), j))
		if exited {
			grp.signalAll(syscall.SIGKILL) // what the command left: no grace
		}
	}
	// inJeopardy stops the job if J − grace has passed (the guard does
	// the same).
	inJeopardy := func() {
		moved()
		if left := time.Until(j); stopping == "" && left <= grace {
			r.g.say("jeopardy", fmt.Sprintf("lock %q in jeopardy: no heartbeat acknowledged for %s; stopping the job before the session can expire", l.Name(), (r.ttl-left).Round(time.Millisecond)),
				map[string]any{"name": l.Name()})
			stop("jeopardy", j)
		}
	}
	for {
		select {
		case err := <-grp.done:
			exited = true
			// After a pause (SIGSTOP) every timer is due at once, and
			// this case may come first: the command's end may be the
			// guard's doing. Look at the lock and the clock first.
			guardDue := !time.Now().Before(sent.Add(-grace))
			if lostCh != nil {
				select {
				case <-l.Done(): // checks the jeopardy deadline itself
					onLost()
				default:
				}
			}
			inJeopardy()
			if stopping == "" && guardDue {
				// The guard acted on the last deadline it had: this
				// process, too slow, handed it the next one too late.
				r.g.say("jeopardy", fmt.Sprintf("lock %q: the guard stopped the job at its jeopardy deadline (no later deadline reached it in time)", l.Name()),
					map[string]any{"name": l.Name()})
				stopping = "jeopardy"
			}
			var ee *exec.ExitError
			switch {
			case errors.As(err, &ee):
				if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
					status = 128 + int(st.Signal())
				} else {
					status = ee.ExitCode()
				}
			case err != nil:
				return 0, err
			}
			switch {
			case stopping != "":
				// Whatever the command left running goes too, now.
				grp.signalAll(syscall.SIGKILL)
			case r.waitChildren:
			case !grp.empty():
				if r.verbose {
					r.g.say("leftovers", fmt.Sprintf("the command exited (status %d): stopping what it left running before releasing lock %q", status, l.Name()), map[string]any{"name": l.Name(), "status": status})
				}
				grp.signalAll(syscall.SIGTERM)
				stopAt(time.Now().Add(r.grace))
			}
			poll.Reset(0)
			polling = poll.C
		case <-polling:
			if grp.empty() {
				return r.outcome(l, status, stopping, lost, grace)
			}
			poll.Reset(pollEvery)
			pollEvery = min(2*pollEvery, 200*time.Millisecond)
		case s := <-sig:
			grp.signal(s.(syscall.Signal)) // we exit with the command
		case <-r.feed.moved:
			moved()
		case <-termT.C:
			inJeopardy()
		case <-killT.C:
			moved()
			switch {
			case time.Now().Before(j):
				if stopping == "" {
					at(killT, j)
				}
			case stopping == "":
				// No grace to give (--grace 0), or the loop was late.
				r.g.say("jeopardy", fmt.Sprintf("lock %q in jeopardy: no heartbeat acknowledged for a whole TTL (%s); killing the job", l.Name(), r.ttl),
					map[string]any{"name": l.Name()})
				stopping = "jeopardy"
				fallthrough
			default:
				grp.signalAll(syscall.SIGKILL)
			}
		case <-stopT.C:
			stopBy = time.Time{}
			grp.signalAll(syscall.SIGKILL)
		case <-lostCh:
			onLost()
		case <-stall:
			select {} // a deadlock, for stallEnv's tests
		}
	}
}

// outcome is runChild's result once the job is gone.
func (r *lockRun) outcome(l *lockcluster.Lock, status int, stopping string, lost error, grace time.Duration) (int, error) {
	switch {
	case lost != nil:
		return 0, &exitError{code: exitLost, msg: fmt.Sprintf("lock %q lost while the command ran (%v); the command was stopped", l.Name(), lost)}
	case stopping == "jeopardy":
		return 0, &exitError{code: exitLost, msg: fmt.Sprintf("lock %q was in jeopardy (no heartbeat acknowledged for TTL − %s, or none handed to the guard in time); the job was stopped before the session could expire", l.Name(), grace)}
	}
	return status, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

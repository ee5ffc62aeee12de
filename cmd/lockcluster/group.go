package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// forwarded are the signals 'lockcluster lock' passes on to the command's
// process group. Catching SIGQUIT also keeps Go from dumping its stacks
// over the user's terminal. Job control (TSTP, TTIN, TTOU, CONT) is the
// terminal's business and is not forwarded.
var forwarded = []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGALRM}

// aborting are the forwarded signals that, while the lock is still awaited,
// abort the request and end the command.
func aborting(s os.Signal) bool {
	switch s {
	case syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM:
		return true
	}
	return false
}

// group is the job 'lockcluster lock' runs: the command, in a process
// group of its own (so that a shell pipeline and what it started in the
// background get signals together), and on Linux in a cgroup of its own
// where one can be made, or else with lockcluster as the subreaper of its
// descendants (job_linux.go): what the command starts with setsid or a
// double fork is part of the job all the same.
//
// A guard process (this binary's hidden __reap command) watches over it.
// It holds the read end of a pipe whose write end only lockcluster has,
// and learns through it the job's process group, its cgroup, and every
// new jeopardy deadline (deadman.go). It kills the whole job:
//
//   - at the jeopardy deadline J, SIGTERM at J − stopGrace first, when
//     lockcluster hands it no later deadline in time: lockcluster is
//     stopped (SIGSTOP), starved of CPU or stuck, or its session is in
//     jeopardy. The cluster cannot expire the session before J + TTL/10,
//     so the job is dead before anyone else can be granted the lock;
//   - at once, at end of file without "done": lockcluster died (kill -9,
//     OOM). On Linux the command's direct child also gets SIGKILL from the
//     kernel then (Pdeathsig).
//
// Whatever stops the guard too (a paused virtual machine, a stopped
// cgroup) is beyond it: fencing tokens are the answer to that.
type group struct {
	cmd    *exec.Cmd
	pgid   int
	done   chan error // the command's Wait result
	cg     string     // the job's cgroup directory; "": none
	sub    bool       // lockcluster is the subreaper of the command's descendants
	guard  *exec.Cmd
	guardW *os.File
	mute   bool // the guard could not be told something: said once
	tty    bool // the group was given the terminal's foreground
}

// groupConfig is what startGroup needs besides the command.
type groupConfig struct {
	cgroup    bool          // run the job in a cgroup of its own if one can be made
	deadline  time.Time     // the session's jeopardy deadline now
	stopGrace time.Duration // SIGTERM this long before the deadline
	note      func(string)  // says (with --verbose) what the job could not have
}

// noCgroupEnv, set to anything, keeps 'lockcluster lock' from making a
// cgroup for its command: the process group (and on Linux the subreaper)
// stands for the job, as where no cgroup can be made. For tests, and for
// a system whose cgroups are managed by something that would object.
const noCgroupEnv = "LOCKCLUSTER_NO_CGROUP"

// startGroup starts argv as a job.
//
// Pdeathsig is sent when the *thread* that forked the child exits, not the
// process (prctl(2)). Go runs goroutines on threads it may end: a thread
// whose goroutine locked it (runtime.LockOSThread) and returned without
// unlocking is terminated, whichever goroutine that was. Forking from an
// arbitrary goroutine could thus SIGKILL the command at some random later
// moment while lockcluster lives (golang/go#27505). So the child is forked
// by a goroutine locked to its thread that stays locked while it waits
// for the child: that thread lives exactly as long as the child needs it.
func startGroup(argv, env []string, cfg groupConfig) (*group, error) {
	g := &group{done: make(chan error, 1)}
	var cg *jobCgroup
	if cfg.cgroup {
		var err error
		if cg, err = newJobCgroup(); err != nil {
			cfg.note(fmt.Sprintf("no cgroup for the command (%v): %s", err, g.fallback()))
		}
	} else {
		cfg.note(fmt.Sprintf("no cgroup for the command (%s is set): %s", noCgroupEnv, g.fallback()))
	}
	if cg != nil {
		g.cg = cg.dir
	} else {
		g.sub = becomeSubreaper()
	}
	// A new process group is a background job: if it read from the
	// terminal it would be stopped (SIGTTIN). When lockcluster is the
	// terminal's foreground job, the command's group becomes it instead
	// (as a shell does), and gets the terminal's ^C and ^\ itself.
	g.tty = foreground()

	// The guard first, so that the job is covered from its first moment.
	g.startGuard()
	g.tell("cgroup " + g.cg)
	g.deadline(cfg.deadline, cfg.stopGrace)

	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Never unlocked: when this goroutine returns, after the child
		// has been reaped, the runtime ends the thread.
		err := g.command(argv, env, cg).Start()
		if err != nil && cg != nil {
			// clone3 into the cgroup was refused (a kernel before 5.7, a
			// cgroup that takes no processes): run without it.
			cg.closeFD()
			cgroupRemove(cg.dir, 0)
			g.cg, g.sub = "", becomeSubreaper()
			g.tell("cgroup ")
			if err2 := g.command(argv, env, nil).Start(); err2 == nil {
				cfg.note(fmt.Sprintf("the command could not start in a cgroup (%v): %s", err, g.fallback()))
				cg, err = nil, nil
			} else {
				err = err2
			}
		}
		if cg != nil {
			cg.closeFD()
		}
		if err != nil {
			started <- err
			return
		}
		started <- nil
		g.done <- g.cmd.Wait()
	}()
	if err := <-started; err != nil {
		if g.cg != "" {
			cgroupRemove(g.cg, 0)
		}
		g.standDown()
		return nil, err
	}
	g.pgid = g.cmd.Process.Pid
	g.tell("pgid " + strconv.Itoa(g.pgid))
	return g, nil
}

// command is the exec.Cmd for argv, placed in cg if not nil.
func (g *group) command(argv, env []string, cg *jobCgroup) *exec.Cmd {
	g.cmd = exec.Command(argv[0], argv[1:]...)
	g.cmd.Stdin, g.cmd.Stdout, g.cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	g.cmd.Env = env
	attr := &syscall.SysProcAttr{Setpgid: true}
	setPdeathsig(attr)
	if g.tty {
		attr.Foreground, attr.Ctty = true, 0
	}
	if cg != nil {
		cg.place(attr)
	}
	g.cmd.SysProcAttr = attr
	return g.cmd
}

// fallback says what stands for the job without a cgroup.
func (g *group) fallback() string {
	if runtime.GOOS == "linux" {
		return "its process group and its descendants (lockcluster is their subreaper) stand for the job; " +
			"if lockcluster itself is killed, a process that left the process group (setsid) survives it"
	}
	return "its process group stands for the job; a process that leaves it (setsid) is not stopped with it"
}

// signal sends s to the command's process group: the signals lockcluster
// passes on.
func (g *group) signal(s syscall.Signal) { syscall.Kill(-g.pgid, s) }

// signalAll sends s to every process of the job: its process group, its
// cgroup, and (without a cgroup, on Linux) the command's descendants.
func (g *group) signalAll(s syscall.Signal) {
	syscall.Kill(-g.pgid, s)
	cgroupSignal(g.cg, s)
	if g.sub {
		signalDescendants(os.Getpid(), g.guardPid(), s, g.cmd.Process.Pid)
	}
}

// empty reports whether nothing of the job runs any more. Call it once
// the command itself has exited.
func (g *group) empty() bool {
	if g.cg != "" {
		return cgroupEmpty(g.cg)
	}
	if g.sub && len(descendants(os.Getpid(), g.guardPid(), g.cmd.Process.Pid)) > 0 {
		return false
	}
	return syscall.Kill(-g.pgid, 0) == syscall.ESRCH
}

func (g *group) guardPid() int {
	if g.guard == nil || g.guard.Process == nil {
		return 0
	}
	return g.guard.Process.Pid
}

// finish runs once the command has exited and its job is empty (or as
// empty as SIGKILL makes it within a few seconds): it takes the terminal
// back, removes the job's cgroup and dismisses the guard.
func (g *group) finish() {
	if g.tty {
		reclaimTerminal()
	}
	if !g.empty() {
		g.signalAll(syscall.SIGKILL)
		for end := time.Now().Add(5 * time.Second); !g.empty() && time.Now().Before(end); {
			time.Sleep(10 * time.Millisecond) // poll: the kernel tells no one
		}
	}
	if g.cg != "" {
		if err := cgroupRemove(g.cg, time.Second); err != nil {
			fmt.Fprintf(os.Stderr, "lockcluster: cannot remove the command's cgroup: %v\n", err)
		}
	}
	if g.empty() {
		g.standDown()
	} // else lockcluster's exit is the guard's end of file: it kills what is left
}

func (g *group) startGuard() {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "lockcluster: no guard for the command: %v\n", err)
		return
	}
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(os.Stderr, "lockcluster: no guard for the command: %v\n", err)
		return
	}
	defer r.Close()
	cmd := exec.Command(exe, "__reap")
	cmd.Stdin = r // stdout and stderr: /dev/null, so it holds no caller's pipe open
	// Its own process group: the terminal's ^C must not reach it, nor a
	// signal to lockcluster's group (kill -STOP -PGID).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		fmt.Fprintf(os.Stderr, "lockcluster: no guard for the command: %v\n", err)
		return
	}
	g.guard, g.guardW = cmd, w
}

// tell sends the guard one line. A guard that does not take it within a
// second (it is stopped too, and the pipe is full) misses it: it then acts
// on an older deadline, earlier, never later.
func (g *group) tell(line string) {
	if g.guardW == nil {
		return
	}
	g.guardW.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(g.guardW, line+"\n"); err != nil && !g.mute {
		g.mute = true
		fmt.Fprintf(os.Stderr, "lockcluster: the guard process missed an update (%v): it may stop the command early\n", err)
	}
}

// deadline hands the guard the jeopardy deadline j: SIGKILL at j, SIGTERM
// grace before.
func (g *group) deadline(j time.Time, grace time.Duration) {
	if j.IsZero() {
		return
	}
	m := monoAt(j)
	g.tell(fmt.Sprintf("deadline %d %d", m, m-int64(grace)))
}

// standDown tells the guard that the job ended normally, and waits for it.
func (g *group) standDown() {
	if g.guard == nil {
		return
	}
	g.tell("done")
	g.guardW.Close()
	g.guard.Wait()
	g.guard = nil
}

// newReap is the hidden guard command (group): it reads its orders on
// stdin, one a line:
//
//	cgroup DIR          the job's cgroup ("cgroup " alone: none)
//	pgid N              the job's process group
//	deadline J T        SIGKILL at J, SIGTERM at T (CLOCK_MONOTONIC ns)
//	done                the job ended normally: exit
//
// End of file without "done" means lockcluster died: it kills the job at
// once and removes its cgroup.
func newReap() *cobra.Command {
	return &cobra.Command{
		Use:    "__reap",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			signal.Ignore(forwarded...)
			guard(os.Stdin)
			return nil
		},
	}
}

// guard is the guard's loop (newReap).
func guard(in io.Reader) {
	cli, self := os.Getppid(), os.Getpid()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var (
		pgid            int
		cg              string
		termAt, killAt  int64 // CLOCK_MONOTONIC ns; 0: no deadline yet
		terming, killed bool
	)
	kill := func(s syscall.Signal) {
		if pgid > 1 {
			syscall.Kill(-pgid, s)
		}
		cgroupSignal(cg, s)
		if cg == "" && os.Getppid() == cli {
			// lockcluster lives (stopped, stuck): the job's processes
			// that left its process group are still its descendants.
			signalDescendants(cli, self, s)
		}
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var wake <-chan time.Time
		if killAt != 0 && !killed {
			next := killAt
			if !terming && termAt < killAt {
				next = termAt
			}
			timer.Reset(max(untilMono(next), 0))
			wake = timer.C
		}
		select {
		case line, ok := <-lines:
			timer.Stop()
			if !ok {
				kill(syscall.SIGKILL)
				if cg != "" {
					for end := time.Now().Add(10 * time.Second); !cgroupEmpty(cg) && time.Now().Before(end); {
						time.Sleep(5 * time.Millisecond) // poll: the kernel tells no one
					}
					cgroupRemove(cg, time.Second)
				}
				return
			}
			verb, arg, _ := strings.Cut(line, " ")
			switch verb {
			case "done":
				return
			case "pgid":
				if n, err := strconv.Atoi(arg); err == nil && n > 1 {
					pgid = n
				}
			case "cgroup":
				cg = arg
			case "deadline":
				// Once the job is being stopped, a later deadline does
				// not save it: lockcluster stops it too (lock.go).
				var j, t int64
				if _, err := fmt.Sscan(arg, &j, &t); err == nil && !terming && !killed {
					killAt, termAt = j, t
				}
			}
		case <-wake:
			switch now := monoNow(); {
			case now >= killAt:
				kill(syscall.SIGKILL)
				killed = true
			case now >= termAt && !terming:
				kill(syscall.SIGTERM)
				terming = true
			}
		}
	}
}

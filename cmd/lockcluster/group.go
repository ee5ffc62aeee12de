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

// group is the command 'lockcluster lock' runs, in a process group of its
// own, so that a shell pipeline and whatever it started in the background
// are stopped together when the lock is lost.
//
// Three things stop the group when lockcluster itself dies (kill -9, OOM):
// on Linux the command's direct child gets SIGKILL from the kernel
// (Pdeathsig); and on every Unix a small reaper process (this binary's
// hidden __reap command), which holds the read end of a pipe whose write
// end only lockcluster has, sees end of file when lockcluster is gone and
// SIGKILLs the whole group. The session's TTL passes before anyone else can
// be granted the lock, so the group is gone before the lock changes hands.
type group struct {
	cmd    *exec.Cmd
	pgid   int
	done   chan error // the command's Wait result
	reaper *exec.Cmd
	reapW  *os.File
	tty    bool // the group was given the terminal's foreground
}

// startGroup starts argv in a new process group.
//
// Pdeathsig is sent when the *thread* that forked the child exits, not the
// process (prctl(2)). Go runs goroutines on threads it may end: a thread
// whose goroutine locked it (runtime.LockOSThread) and returned without
// unlocking is terminated, whichever goroutine that was. Forking from an
// arbitrary goroutine could thus SIGKILL the command at some random later
// moment while lockcluster lives (golang/go#27505). So the child is forked
// by a goroutine locked to its thread that stays locked while it waits
// for the child: that thread lives exactly as long as the child needs it.
func startGroup(argv, env []string) (*group, error) {
	g := &group{done: make(chan error, 1)}
	g.cmd = exec.Command(argv[0], argv[1:]...)
	g.cmd.Stdin, g.cmd.Stdout, g.cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	g.cmd.Env = env
	attr := &syscall.SysProcAttr{Setpgid: true}
	setPdeathsig(attr)
	// A new process group is a background job: if it read from the
	// terminal it would be stopped (SIGTTIN). When lockcluster is the
	// terminal's foreground job, the command's group becomes it instead
	// (as a shell does), and gets the terminal's ^C and ^\ itself.
	if foreground() {
		attr.Foreground, attr.Ctty = true, 0
		g.tty = true
	}
	g.cmd.SysProcAttr = attr

	// The reaper first, so that the group is covered from its first
	// moment (it learns the group id through the pipe).
	g.startReaper()

	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Never unlocked: when this goroutine returns, after the child
		// has been reaped, the runtime ends the thread.
		if err := g.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		g.done <- g.cmd.Wait()
	}()
	if err := <-started; err != nil {
		g.standDown()
		return nil, err
	}
	g.pgid = g.cmd.Process.Pid
	if g.reapW != nil {
		fmt.Fprintf(g.reapW, "%d\n", g.pgid)
	}
	return g, nil
}

// signal sends s to every process of the group.
func (g *group) signal(s syscall.Signal) { syscall.Kill(-g.pgid, s) }

// finish runs once the command has exited: it takes the terminal back
// and dismisses the reaper, leaving anything the command left in the
// background alone.
func (g *group) finish() {
	if g.tty {
		reclaimTerminal()
	}
	g.standDown()
}

func (g *group) startReaper() {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "lockcluster: no reaper for the command's process group: %v\n", err)
		return
	}
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(os.Stderr, "lockcluster: no reaper for the command's process group: %v\n", err)
		return
	}
	defer r.Close()
	cmd := exec.Command(exe, "__reap")
	cmd.Stdin = r // stdout and stderr: /dev/null, so it holds no caller's pipe open
	// Its own process group: the terminal's ^C must not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		fmt.Fprintf(os.Stderr, "lockcluster: no reaper for the command's process group: %v\n", err)
		return
	}
	g.reaper, g.reapW = cmd, w
}

// standDown tells the reaper that the group ended normally, and waits for it.
func (g *group) standDown() {
	if g.reaper == nil {
		return
	}
	io.WriteString(g.reapW, "done\n")
	g.reapW.Close()
	g.reaper.Wait()
	g.reaper = nil
}

// newReap is the hidden reaper: it reads a process group id from stdin,
// then waits. "done" means the group ended normally; end of file without
// it means lockcluster died: it SIGKILLs the group.
func newReap() *cobra.Command {
	return &cobra.Command{
		Use:    "__reap",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			signal.Ignore(forwarded...)
			in := bufio.NewScanner(os.Stdin)
			pgid := 0
			for in.Scan() {
				line := strings.TrimSpace(in.Text())
				if line == "done" {
					return nil
				}
				if n, err := strconv.Atoi(line); err == nil && n > 1 {
					pgid = n
				}
			}
			if pgid > 1 {
				syscall.Kill(-pgid, syscall.SIGKILL)
			}
			return nil
		},
	}
}

//go:build unix

package web_test

import (
	"os/exec"
	"syscall"
	"time"
)

// killGroup runs the browser in a process group of its own: a timeout kills
// the whole group, and so does the cleanup it returns, for any helper
// process left behind once the browser exited.
func killGroup(cmd *exec.Cmd) (cleanup func()) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return func() {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}
}

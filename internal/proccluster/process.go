package proccluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// A node's process: started, signalled, waited for. A node's exit is
// expected once the cluster sent it SIGKILL or SIGTERM (Config.OnExit).

// Start starts node i, for the first time or again on its data directory
// after it exited.
func (c *Cluster) Start(i int) error {
	n := c.Nodes[i]
	if c.Running(i) {
		return fmt.Errorf("%s is still running", n.ID)
	}
	f, err := os.OpenFile(n.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if c.cfg.StartMarker != "" {
		fmt.Fprintf(f, "=== %s: starting %s at %s\n", c.cfg.StartMarker, n.ID, time.Now().Format(time.RFC3339Nano))
	}
	bin := c.Bin
	if n.Bin != "" {
		bin = n.Bin
	}
	cmd := exec.Command(bin, n.Args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting %s: %w", n.ID, err)
	}
	done := make(chan struct{})
	c.mu.Lock()
	n.cmd, n.done, n.expected = cmd, done, false
	c.mu.Unlock()
	go func() {
		err := cmd.Wait()
		f.Close()
		c.mu.Lock()
		expected := n.expected
		c.mu.Unlock()
		close(done)
		if c.cfg.OnExit != nil {
			c.cfg.OnExit(n, err, expected)
		}
	}()
	return nil
}

// Running reports whether node i's process was started and has not exited.
func (c *Cluster) Running(i int) bool {
	c.mu.Lock()
	done := c.Nodes[i].done
	c.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Done is closed when node i's current process has exited (nil before
// its first start).
func (c *Cluster) Done(i int) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Nodes[i].done
}

// PID is node i's process id, 0 when it does not run.
func (c *Cluster) PID(i int) int {
	if !c.Running(i) {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Nodes[i].cmd.Process.Pid
}

// ProcessState is how node i's last process exited (nil while it runs).
func (c *Cluster) ProcessState(i int) *os.ProcessState {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Nodes[i].cmd == nil {
		return nil
	}
	return c.Nodes[i].cmd.ProcessState
}

// Signal sends s to node i. SIGKILL and SIGTERM mark its exit expected.
func (c *Cluster) Signal(i int, s syscall.Signal) error {
	n := c.Nodes[i]
	if !c.Running(i) {
		return fmt.Errorf("%s is not running", n.ID)
	}
	c.mu.Lock()
	if s == syscall.SIGKILL || s == syscall.SIGTERM {
		n.expected = true
	}
	p := n.cmd.Process
	c.mu.Unlock()
	return p.Signal(s)
}

// Pause stops node i with SIGSTOP: it neither answers nor refuses.
func (c *Cluster) Pause(i int) error { return c.Signal(i, syscall.SIGSTOP) }

// Resume continues a paused node i (SIGCONT).
func (c *Cluster) Resume(i int) error { return c.Signal(i, syscall.SIGCONT) }

// Kill SIGKILLs node i and waits until it is gone.
func (c *Cluster) Kill(i int) error {
	if err := c.Signal(i, syscall.SIGKILL); err != nil {
		return err
	}
	return c.wait(i, 10*time.Second)
}

// Terminate sends node i SIGTERM (after SIGCONT, should it be paused) and
// waits for it to exit, SIGKILLing it if it has not within 20s.
func (c *Cluster) Terminate(i int) error {
	if !c.Running(i) {
		return nil
	}
	_ = c.Signal(i, syscall.SIGCONT)
	_ = c.Signal(i, syscall.SIGTERM)
	return c.wait(i, 20*time.Second)
}

// wait waits up to d for node i to exit, then SIGKILLs it and waits.
func (c *Cluster) wait(i int, d time.Duration) error {
	done := c.Done(i)
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-time.After(d):
	}
	_ = c.Signal(i, syscall.SIGKILL)
	select {
	case <-done:
		return fmt.Errorf("%s did not exit within %s; killed", c.Nodes[i].ID, d)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s did not die of SIGKILL", c.Nodes[i].ID)
	}
}

// RestartAll sends sig (SIGTERM: a clean stop; SIGKILL: a crash) to every
// node at once, waits for all to be gone, and starts them again on their
// data.
func (c *Cluster) RestartAll(sig syscall.Signal) error {
	var errs []error
	for i := range c.Nodes {
		_ = c.Signal(i, syscall.SIGCONT)
		_ = c.Signal(i, sig)
	}
	for i := range c.Nodes {
		errs = append(errs, c.wait(i, 20*time.Second))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return c.StartAll()
}

// Stop stops every node (SIGTERM to all, then SIGKILL to any still there
// after 20s) and removes the cluster's directory unless Keep is set or a
// process still runs on a data directory in it (InUse: a node started by
// hand).
func (c *Cluster) Stop() {
	for i := range c.Nodes {
		if c.Running(i) {
			_ = c.Signal(i, syscall.SIGCONT)
			_ = c.Signal(i, syscall.SIGTERM)
		}
	}
	for i := range c.Nodes {
		_ = c.wait(i, 20*time.Second)
	}
	if !c.Keep && len(c.InUse()) == 0 {
		os.RemoveAll(c.Dir)
	}
}

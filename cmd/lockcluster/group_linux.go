package main

import "syscall"

// setPdeathsig has the kernel SIGKILL the command when the thread that
// forked it ends (see startGroup for why that is lockcluster's life).
func setPdeathsig(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

//go:build !linux

package main

import "syscall"

// setPdeathsig does nothing where there is no parent-death signal: the
// reaper alone stops the group when lockcluster dies.
func setPdeathsig(*syscall.SysProcAttr) {}

//go:build !linux

package main

import (
	"errors"
	"syscall"
	"time"
)

// Elsewhere than on Linux there are no cgroups and no subreaper: the
// command's process group stands for its job (job_linux.go).

type jobCgroup struct{ dir string }

func newJobCgroup() (*jobCgroup, error) {
	return nil, errors.New("cgroups are Linux's")
}

func (*jobCgroup) place(*syscall.SysProcAttr) {}
func (*jobCgroup) closeFD()                   {}

func cgroupSignal(string, syscall.Signal)                {}
func cgroupEmpty(string) bool                            { return true }
func cgroupRemove(string, time.Duration) error           { return nil }
func becomeSubreaper() bool                              { return false }
func descendants(int, int, ...int) []int                 { return nil }
func signalDescendants(int, int, syscall.Signal, ...int) {}

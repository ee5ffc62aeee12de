package main

import (
	"os/signal"
	"syscall"
	"unsafe"
)

// foreground reports whether stdin is a terminal whose foreground process
// group is lockcluster's own.
func foreground() bool {
	pgrp, ok := ttyPgrp()
	return ok && pgrp == syscall.Getpgrp()
}

func ttyPgrp() (int, bool) {
	var pgrp int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, 0, uintptr(syscall.TIOCGPGRP), uintptr(unsafe.Pointer(&pgrp))); e != 0 {
		return 0, false
	}
	return int(pgrp), true
}

// reclaimTerminal makes lockcluster's process group the terminal's
// foreground again. A background process that does so gets SIGTTOU
// unless it ignores it, as shells do.
func reclaimTerminal() {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	pgrp := int32(syscall.Getpgrp())
	syscall.Syscall(syscall.SYS_IOCTL, 0, uintptr(syscall.TIOCSPGRP), uintptr(unsafe.Pointer(&pgrp)))
}

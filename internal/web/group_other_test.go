//go:build !unix

package web_test

import "os/exec"

func killGroup(cmd *exec.Cmd) (cleanup func()) { return func() {} }

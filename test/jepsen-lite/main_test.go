package main

import (
	"os"
	"testing"
)

// TestMain lets the test binary serve as a client process of the harness
// (clientproc.go), as the harness binary itself does.
func TestMain(m *testing.M) {
	if raw := os.Getenv(clientEnv); raw != "" {
		os.Exit(clientMain(raw))
	}
	os.Exit(m.Run())
}

//go:build linux

package testutil

import (
	"os"
	"syscall"
	"testing"
)

func free(t *testing.T, dir string) uint64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Bavail * uint64(st.Bsize)
}

// The ballast leaves the space asked for, on a tmpfs of the test's own;
// removing it frees the rest again.
func TestBallastFillsTheTmpfs(t *testing.T) {
	dir := Tmpfs(t, 4<<20)
	before := free(t, dir)
	path := Ballast(t, dir, 256<<10)
	if got := free(t, dir); got > 256<<10 {
		t.Fatalf("%d bytes free with the ballast, want at most 256 KiB", got)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if got := free(t, dir); got != before {
		t.Fatalf("%d bytes free once the ballast is gone, want %d as before", got, before)
	}
}

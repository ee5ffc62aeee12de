//go:build linux

package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of size bytes on a new directory for this test and
// returns it. It is unmounted by a cleanup registered now, so after
// whatever the test starts later on it (cleanups run last first). Root
// only: the test is skipped otherwise, and where the mount fails.
func Tmpfs(t testing.TB, size uint64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("this test fills a small file system: mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("cannot mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// Ballast fills the file system of dir but for leave bytes with a file
// (allocated, not written) in dir, and returns the file's path: remove it
// to free the space.
func Ballast(t testing.TB, dir string, leave uint64) string {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := st.Bavail * uint64(st.Bsize)
	if free <= leave {
		t.Fatalf("%s has %d bytes free, want more than %d", dir, free, leave)
	}
	path := filepath.Join(dir, "ballast")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, int64(free-leave)); err != nil {
		t.Fatal(err)
	}
	return path
}

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// On Linux the job 'lockcluster lock' runs is a cgroup v2 of its own
// wherever one can be made: every process CMD starts stays in it whatever
// it does (a background job, a double fork, setsid), the kernel kills them
// all at once (cgroup.kill), and "populated 0" says when they are all
// gone. Where none can be made (no cgroup2 mount, no write access: a
// systemd service without Delegate=yes run by a user), lockcluster becomes
// the child subreaper of the command's descendants: whatever CMD leaves
// behind is reparented to lockcluster instead of init, so it can still be
// found (/proc's parent links) and stopped.

// jobCgroup is the cgroup a command runs in.
type jobCgroup struct {
	dir string
	fd  int // the directory, open, for clone3(CLONE_INTO_CGROUP)
}

var cgroupSeq atomic.Int64

// newJobCgroup makes a child cgroup of this process's own cgroup v2 for a
// command: the cgroup2 mount from /proc/self/mountinfo, this process's
// cgroup from /proc/self/cgroup ("0::/path").
func newJobCgroup() (*jobCgroup, error) {
	mount, root, err := cgroup2Mount()
	if err != nil {
		return nil, err
	}
	own, err := ownCgroup()
	if err != nil {
		return nil, err
	}
	rel, ok := own, true
	if root != "/" {
		rel, ok = strings.CutPrefix(own, root)
		ok = ok && (rel == "" || rel[0] == '/')
	}
	if !ok {
		return nil, fmt.Errorf("this process's cgroup %s is outside the cgroup2 mount at %s (root %s)", own, mount, root)
	}
	dir := filepath.Join(mount, rel, fmt.Sprintf("lockcluster-%d-%d", os.Getpid(), cgroupSeq.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(dir)
		return nil, err
	}
	return &jobCgroup{dir: dir, fd: fd}, nil
}

// cgroup2Mount finds the cgroup2 file system's mount point and the path,
// in the hierarchy, of its root.
func cgroup2Mount() (mount, root string, err error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - cgroup2 cgroup2 rw
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 1 || qf[0] != "cgroup2" {
			continue
		}
		return unescapeMount(pf[4]), unescapeMount(pf[3]), nil
	}
	return "", "", errors.New("no cgroup2 file system is mounted")
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ownCgroup is this process's cgroup in the v2 hierarchy.
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, nil
		}
	}
	return "", errors.New("this process is in no cgroup v2 (/proc/self/cgroup has no 0:: line)")
}

// place has the command start inside cg: clone3 with CLONE_INTO_CGROUP,
// so that it is in the cgroup before it runs a single instruction (no
// window in which it could fork a process that escapes).
func (cg *jobCgroup) place(a *syscall.SysProcAttr) {
	a.UseCgroupFD, a.CgroupFD = true, cg.fd
}

// closeFD closes the directory once the command has started.
func (cg *jobCgroup) closeFD() {
	if cg.fd >= 0 {
		unix.Close(cg.fd)
		cg.fd = -1
	}
}

// procs are the processes in the cgroup.
func cgroupProcs(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for f := range strings.FieldsSeq(string(b)) {
		if n, err := strconv.Atoi(f); err == nil && n > 0 {
			pids = append(pids, n)
		}
	}
	return pids
}

// cgroupSignal sends s to every process in the cgroup at dir. SIGKILL goes
// through cgroup.kill where the kernel has it (5.14): one write kills them
// all, forks in progress included. Elsewhere, and for other signals, each
// process listed gets s; for SIGKILL that is repeated until none is left
// (a process may fork while the list is read), for a second at most.
func cgroupSignal(dir string, s syscall.Signal) {
	if dir == "" {
		return
	}
	if s == syscall.SIGKILL {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err == nil {
			return
		}
	}
	for end := time.Now().Add(time.Second); ; {
		pids := cgroupProcs(dir)
		for _, p := range pids {
			syscall.Kill(p, s)
		}
		if s != syscall.SIGKILL || len(pids) == 0 || time.Now().After(end) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// cgroupEmpty reports whether no process is left in the cgroup at dir (or
// it is gone).
func cgroupEmpty(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return len(cgroupProcs(dir)) == 0
	}
	return bytes.Contains(b, []byte("populated 0"))
}

// cgroupRemove removes the cgroup at dir once it is empty, waiting up to d
// for its processes to be gone.
func cgroupRemove(dir string, d time.Duration) error {
	if dir == "" {
		return nil
	}
	for end := time.Now().Add(d); ; {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if time.Now().After(end) {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// becomeSubreaper makes this process the child subreaper of its
// descendants (prctl PR_SET_CHILD_SUBREAPER).
func becomeSubreaper() bool {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == nil
}

// procStat is what descendants needs of /proc/PID/stat.
type procStat struct {
	pid, ppid int
	zombie    bool
}

// readProcs lists every process of the machine.
func readProcs() []procStat {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	var out []procStat
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + n + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(string(f[1]))
		out = append(out, procStat{pid: pid, ppid: ppid, zombie: string(f[0]) == "Z"})
	}
	return out
}

// descendants are the living processes below root in the process tree,
// except skip and its own descendants. When root is this process, its
// zombie children other than those in keep (whose Wait belongs to
// os/exec) are reaped on the way: as the subreaper it inherits every
// orphan of the command, and nobody else would.
func descendants(root, skip int, keep ...int) []int {
	procs := readProcs()
	children := map[int][]procStat{}
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p)
	}
	self := os.Getpid()
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		parent := queue[0]
		queue = queue[1:]
		for _, c := range children[parent] {
			if c.pid == skip {
				continue
			}
			queue = append(queue, c.pid)
			if !c.zombie {
				out = append(out, c.pid)
				continue
			}
			if parent == self && root == self && !contains(keep, c.pid) {
				var ws syscall.WaitStatus
				syscall.Wait4(c.pid, &ws, syscall.WNOHANG, nil)
			}
		}
	}
	return out
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// signalDescendants sends s to every living descendant of root but skip.
func signalDescendants(root, skip int, s syscall.Signal, keep ...int) {
	for _, p := range descendants(root, skip, keep...) {
		syscall.Kill(p, s)
	}
}

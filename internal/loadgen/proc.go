package loadgen

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ProcUsage is one process's CPU use over a window and its RSS at the end.
type ProcUsage struct {
	Name   string  `json:"name"`
	PID    int     `json:"pid"`
	Cores  float64 `json:"cpu_cores"` // CPU seconds per wall second
	RSSMiB float64 `json:"rss_mib"`
	// The RSS's anonymous part (heap, stacks) and its file-backed part
	// (bbolt's memory-mapped log, the binary): the kernel can drop the
	// latter's clean pages under memory pressure.
	AnonMiB float64 `json:"rss_anon_mib"`
	FileMiB float64 `json:"rss_file_mib"`
}

// clockTick is USER_HZ, which /proc/PID/stat counts in; it is 100 on
// every Linux this runs on.
const clockTick = 100

// CPUTime returns the user+system CPU time pid has used (from
// /proc/PID/stat; Linux only).
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: fields after its ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return time.Duration(utime+stime) * time.Second / clockTick, nil
}

// RSS returns pid's resident set size in bytes (VmRSS of /proc/PID/status).
func RSS(pid int) (int64, error) {
	m, err := memory(pid)
	return m["VmRSS"], err
}

// memory reads the kB fields of /proc/PID/status (VmRSS, RssAnon,
// RssFile, ...) in bytes.
func memory(pid int) (map[string]int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, rest, ok := strings.Cut(line, ":")
		if f := strings.Fields(rest); ok && len(f) == 2 && f[1] == "kB" {
			if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				out[k] = kb * 1024
			}
		}
	}
	if _, ok := out["VmRSS"]; !ok {
		return nil, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
	}
	return out, nil
}

// LoadAvg returns the 1-minute load average (0 if unknown).
func LoadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// CPUMeter measures the CPU use of a set of processes over a window.
type CPUMeter struct {
	names []string
	pids  []int
	cpu   []time.Duration
	at    time.Time
}

// StartCPU starts measuring the named processes (pid 0 is this process).
func StartCPU(names []string, pids []int) *CPUMeter {
	m := &CPUMeter{names: names, pids: pids, cpu: make([]time.Duration, len(pids)), at: time.Now()}
	for i, p := range pids {
		m.cpu[i] = cpuOf(p)
	}
	return m
}

func cpuOf(pid int) time.Duration {
	if pid == 0 {
		var ru syscall.Rusage
		if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
			return 0
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	d, _ := CPUTime(pid)
	return d
}

// Stop returns each process's cores used since StartCPU, and its RSS now.
func (m *CPUMeter) Stop() []ProcUsage {
	wall := time.Since(m.at).Seconds()
	out := make([]ProcUsage, len(m.pids))
	for i, p := range m.pids {
		pid := p
		if pid == 0 {
			pid = os.Getpid()
		}
		used := (cpuOf(p) - m.cpu[i]).Seconds()
		mem, _ := memory(pid)
		mib := func(k string) float64 { return float64(mem[k]>>10) / 1024 }
		out[i] = ProcUsage{Name: m.names[i], PID: pid, Cores: float64(int64(used/wall*100)) / 100,
			RSSMiB: mib("VmRSS"), AnonMiB: mib("RssAnon"), FileMiB: mib("RssFile")}
	}
	return out
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// Some clients run as processes of their own, so that the nemesis can
// SIGSTOP them: a paused client is the GC pause that breaks lease-based
// locks. Such a process is this program again (or the test binary), started
// with the environment variable clientEnv holding its workerConfig as JSON;
// it writes its history to stdout, one JSON line per entry, and writes to
// the fenced register over HTTP.

const clientEnv = "JEPSEN_LITE_CLIENT"

// clientConfig is what a client process gets.
type clientConfig struct {
	workerConfig
	// MaxLife bounds the process's life even if the harness dies.
	MaxLife time.Duration `json:"maxLife"`
}

// clientMain runs a client process; it returns the exit status.
func clientMain(raw string) int {
	var cfg clientConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "jepsen-lite client: bad %s: %v\n", clientEnv, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.MaxLife)
	defer cancel()
	sink := &lineSink{enc: json.NewEncoder(os.Stdout)}
	reg := &httpWriter{base: cfg.Register, hc: &http.Client{Timeout: 5 * time.Second}}
	newWorker(cfg.workerConfig, sink, reg).run(ctx)
	return 0
}

// clientProc is a client process seen from the harness.
type clientProc struct {
	id   int
	cmd  *exec.Cmd
	done chan struct{}
}

func startClientProc(cfg clientConfig, sink Sink, logDir string) (*clientProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(logDir, fmt.Sprintf("client%d.log", cfg.Process)))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), clientEnv+"="+string(raw))
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p := &clientProc{id: cfg.Process, cmd: cmd, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<16), 1<<24)
		for sc.Scan() {
			var op Op
			if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
				fmt.Fprintf(logf, "jepsen-lite: bad history line from client %d: %v\n", cfg.Process, err)
				continue
			}
			sink.Add(op)
		}
		_ = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *clientProc) Pause() error  { return p.cmd.Process.Signal(syscall.SIGSTOP) }
func (p *clientProc) Resume() error { return p.cmd.Process.Signal(syscall.SIGCONT) }

// stop asks the process to finish its operation and close its session,
// and kills it if it has not within d.
func (p *clientProc) stop(d time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(d):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

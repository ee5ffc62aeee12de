package main

import (
	"bytes"
	"fmt"
	"math"
	"os/exec"
	"slices"
	"strings"

	"github.com/lockcluster/lockcluster/internal/node"
)

// streamLimits puts the serve settings that bound a client's streams and
// connections in cfg: 0 in a setting means no limit, which the node's
// configuration says with -1 (its 0 is the default).
func (c *serveConfig) streamLimits(cfg *node.Config) error {
	count := func(key string, v int64, max int64) (int, error) {
		switch {
		case v < 0 || v > max:
			return 0, &exitError{code: exitUsage, msg: fmt.Sprintf("--%s=%d: want 0 (no limit) to %d", key, v, max)}
		case v == 0:
			return -1, nil
		}
		return int(v), nil
	}
	var err error
	if cfg.Server.MaxStreamsPerSession, err = count("max-streams-per-session", c.streamsPerSession, math.MaxInt32); err != nil {
		return err
	}
	if cfg.MaxConcurrentStreams, err = count("max-concurrent-streams", c.streamsPerConn, math.MaxUint32>>1); err != nil {
		return err
	}
	if cfg.MaxConnsPerIP, err = count("max-conns-per-ip", c.connsPerIP, math.MaxInt32); err != nil {
		return err
	}
	switch {
	case c.connIdle < 0:
		return &exitError{code: exitUsage, msg: fmt.Sprintf("--conn-idle-timeout=%s: want 0 (never) or a positive duration", c.connIdle)}
	case c.connIdle == 0:
		cfg.ConnIdleTimeout = -1
	default:
		cfg.ConnIdleTimeout = c.connIdle
	}
	return nil
}

// uncapConns adds --max-conns-per-ip=0 to the serve arguments of a
// 'bench --local' cluster, unless they set it or bin does not know it (an
// older binary): every client of the benchmark connects from this
// machine's one address, up to --workers (1,024) Go clients to one node,
// past the default cap.
func uncapConns(bin string, args []string) []string {
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--max-conns-per-ip") }) {
		return args
	}
	help, _ := exec.Command(bin, "serve", "--help").Output()
	if !bytes.Contains(help, []byte("--max-conns-per-ip")) {
		return args
	}
	return append(args, "--max-conns-per-ip=0")
}

package main

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lockcluster/lockcluster/internal/node"
)

// SIGHUP reloads a running node's settings (systemctl reload): serve reads
// the config file and the environment again, the flags given at start
// applied last as at start, and puts the settings below in force; every
// other setting needs a restart, and a change to one is a warning in the
// log that names it. A reload that fails (a file that does not parse, a
// certificate that does not load, a value out of range) changes nothing:
// the log says why, naming the file, and the node serves on.
//
// The environment is the process's: it does not change after start.

// reloadKeys are the settings a reload changes.
var reloadKeys = map[string]bool{
	"log-level": true,
	// The files, read again (internal/node/tls.go); TLS itself cannot be
	// turned on or off.
	"tls-cert": true, "tls-key": true, "tls-ca": true, "tls-client-auth": true,
	"namespace-rate": true, "namespace-burst": true, "namespace-bytes-rate": true, "namespace-bytes-burst": true,
	"refusal-rate": true, "audit-refusal-interval": true,
	// The replicated limits: a leader proposes them at once.
	"limit-name-bytes": true, "limit-scope-names": true, "limit-pending-per-session": true, "limit-held-per-session": true,
	"limit-sessions-per-namespace": true, "limit-min-ttl": true, "limit-max-ttl": true,
	"memory-limit": true, "gc-headroom": true,
}

// reloadable checks the settings a reload changes too, and sets them in
// cfg: the TLS files, the credentials and the server's settings.
func (c *serveConfig) reloadable(cfg *node.Config) error {
	limits := c.limits.fsm()
	if err := limits.Validate(); err != nil {
		return err
	}
	if c.auditRefusalInterval <= 0 {
		return fmt.Errorf("--audit-refusal-interval=%s: want a positive duration", c.auditRefusalInterval)
	}
	if c.namespaceBytesRate < 0 || c.namespaceBytesBurst < 0 {
		return fmt.Errorf("--namespace-bytes-rate=%d, --namespace-bytes-burst=%d: want sizes of 0 or more", c.namespaceBytesRate, c.namespaceBytesBurst)
	}
	cfg.TLS, cfg.Auth = c.tls, c.auth
	cfg.Server.Limits = &limits
	cfg.Server.AuditRefusalInterval = c.auditRefusalInterval
	cfg.Server.NamespaceRate, cfg.Server.NamespaceBurst = c.namespaceRate, int(c.namespaceBurst)
	cfg.Server.NamespaceBytesRate, cfg.Server.NamespaceBytesBurst = float64(c.namespaceBytesRate), int(c.namespaceBytesBurst)
	cfg.Server.RefusalRate = c.refusalRate
	return nil
}

// memoryLimitBytes is the soft memory limit memory-limit asks for: the one
// the process started with (GOMEMLIMIT's, or none) when it is empty.
func (c *serveConfig) memoryLimitBytes() (int64, error) {
	if c.memoryLimit == "" {
		return c.memoryLimit0, nil
	}
	n, err := parseBytes(c.memoryLimit)
	if err != nil {
		return 0, fmt.Errorf("--memory-limit: %w", err)
	}
	return n, nil
}

// setMemoryLimit puts memory-limit in force.
func (c *serveConfig) setMemoryLimit() error {
	n, err := c.memoryLimitBytes()
	if err != nil {
		return err
	}
	debug.SetMemoryLimit(n)
	return nil
}

// gcHeadroom reads gc-headroom: off when it is 0 or GOGC is set.
func gcHeadroom(v string) (headroom uint64, on bool, err error) {
	if v == "0" || os.Getenv("GOGC") != "" {
		return 0, false, nil
	}
	n, err := parseBytes(v)
	if err != nil {
		return 0, false, fmt.Errorf("--gc-headroom: %w", err)
	}
	return uint64(n), true, nil
}

// gcTuner runs tuneGC with the gc-headroom in force, again with a new one
// after a reload.
type gcTuner struct {
	headroom string // in force
	cancel   context.CancelFunc
	done     chan struct{}
}

// set puts headroom v in force (off: the GOGC the process started with).
func (g *gcTuner) set(v string) error {
	n, on, err := gcHeadroom(v)
	if err != nil {
		return err
	}
	if g.cancel != nil && v == g.headroom {
		return nil
	}
	g.stop()
	g.headroom = v
	if on {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		g.cancel, g.done = cancel, done
		go func() { defer close(done); tuneGC(ctx, n, 2*time.Second) }()
	}
	return nil
}

// stop stops the tuner, which restores the GOGC it found.
func (g *gcTuner) stop() {
	if g.cancel != nil {
		g.cancel()
		<-g.done
		g.cancel = nil
	}
}

// reload is serve's answer to SIGHUP: n started with start and c's
// settings.
func (c *serveConfig) reload(n *node.Node, start node.Config, logger hclog.Logger, gc *gcTuner) {
	logger.Info("SIGHUP: reloading the settings", "config", c.file)
	if err := c.reloadFrom(n, start, logger, gc); err != nil {
		logger.Error("reload failed: the settings in force stay", "config", c.file, "error", err)
	}
}

func (c *serveConfig) reloadFrom(n *node.Node, start node.Config, logger hclog.Logger, gc *gcTuner) error {
	nc := defaultServeConfig()
	if err := resolveWith(c.given, nc.settings(), c.file, map[string]any{"auth": &nc.auth}); err != nil {
		return err
	}
	// Check everything first: a reload applies all or nothing.
	level := hclog.LevelFromString(nc.logLevel)
	if level == hclog.NoLevel {
		return fmt.Errorf("--log-level %q is not trace, debug, info, warn or error", nc.logLevel)
	}
	nc.memoryLimit0 = c.memoryLimit0
	mem, err := nc.memoryLimitBytes()
	if err != nil {
		return err
	}
	if _, _, err := gcHeadroom(nc.gcHeadroom); err != nil {
		return err
	}
	cfg := start
	if err := nc.reloadable(&cfg); err != nil {
		return err
	}
	if err := n.Reload(cfg); err != nil {
		return err
	}
	logger.SetLevel(level)
	debug.SetMemoryLimit(mem)
	_ = gc.set(nc.gcHeadroom) // checked above

	// What changed since start, by name.
	var changed []string
	was, now := c.settings(), nc.settings()
	for i, s := range was {
		from, to := s.yamlValue(), now[i].yamlValue()
		switch {
		case from == to:
		case reloadKeys[s.key]:
			changed = append(changed, s.key)
		default:
			logger.Warn("a setting changed that only a restart puts in force: the node keeps the value it started with",
				"setting", s.key, "in_force", from, "configured", to)
		}
	}
	logger.Info("settings reloaded", "config", c.file, "changed_since_start", strings.Join(changed, ","))
	return nil
}

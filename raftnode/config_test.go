package raftnode

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := Config{ID: "n1", DataDir: "/tmp/x", BindAddr: "127.0.0.1:0"}
	if err := valid.validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tc := range []struct {
		name   string
		edit   func(*Config)
		inErr  []string
		forbid bool
	}{
		{"missing ID", func(c *Config) { c.ID = "" }, []string{"ID=", "required"}, true},
		{"missing DataDir", func(c *Config) { c.DataDir = "" }, []string{"DataDir=", "required"}, true},
		{"missing BindAddr", func(c *Config) { c.BindAddr = "" }, []string{"BindAddr="}, true},
		{"bad BindAddr", func(c *Config) { c.BindAddr = "nonsense" }, []string{`BindAddr="nonsense"`}, true},
		{"wildcard bind without advertise", func(c *Config) { c.BindAddr = "0.0.0.0:7701" }, []string{"AdvertiseAddr=", "0.0.0.0:7701"}, true},
		{"wildcard bind with advertise", func(c *Config) { c.BindAddr, c.AdvertiseAddr = ":7701", "10.0.0.1:7701" }, nil, false},
		{"bootstrap without self", func(c *Config) { c.Bootstrap = []Peer{{ID: "n2", Addr: "a:1"}} }, []string{"Bootstrap=", `"n1"`}, true},
		{"bootstrap peer without addr", func(c *Config) { c.Bootstrap = []Peer{{ID: "n1"}, {ID: "n2"}} }, []string{`Bootstrap[1].Addr=""`}, true},
		{"bootstrap duplicate id", func(c *Config) { c.Bootstrap = []Peer{{ID: "n1"}, {ID: "n1", Addr: "a:1"}} }, []string{`Bootstrap[1].ID="n1"`, "duplicate"}, true},
		{"lease above heartbeat", func(c *Config) { c.LeaderLeaseTimeout = time.Second }, []string{"LeaderLeaseTimeout"}, true},
		{"negative heartbeat", func(c *Config) { c.HeartbeatTimeout = -1 }, []string{"HeartbeatTimeout="}, true},
		{"too many append entries", func(c *Config) { c.maxAppendEntries = 2000 }, []string{`MaxAppendEntries="2000"`}, true},
		{"WAL segments too small", func(c *Config) { c.WALSegmentSize = 4096 }, []string{`WALSegmentSize="4096"`, "1048576"}, true},
		{"WAL segments too big", func(c *Config) { c.WALSegmentSize = 1 << 30 }, []string{`WALSegmentSize="1073741824"`}, true},
		{"8 MiB WAL segments", func(c *Config) { c.WALSegmentSize = 8 << 20 }, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := valid
			tc.edit(&cfg)
			err := cfg.validate()
			if !tc.forbid {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate accepted the config")
			}
			for _, s := range tc.inErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
	if _, err := New(Config{DataDir: t.TempDir(), BindAddr: "127.0.0.1:0"}, &listFSM{}); err == nil || !strings.Contains(err.Error(), "ID") {
		t.Fatalf("New without ID: %v", err)
	}
}

func TestNotLeaderErrorMatches(t *testing.T) {
	t.Parallel()
	var err error = &NotLeaderError{LeaderID: "n2", LeaderAddr: "127.0.0.1:1"}
	if !errors.Is(err, ErrNotLeader) || !errors.Is(err, ErrNotApplied) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("errors.Is mismatch for %v", err)
	}
	if !strings.Contains(err.Error(), "n2") {
		t.Fatalf("message %q lacks the leader", err)
	}
	if errors.Is(notApplied{ErrShutdown}, ErrNotLeader) || !errors.Is(notApplied{ErrShutdown}, ErrShutdown) {
		t.Fatal("notApplied must match ErrShutdown but not ErrNotLeader")
	}
}

func TestBroadcasterLatestWins(t *testing.T) {
	t.Parallel()
	b := newBroadcaster()
	ch, cancel := b.subscribe()
	if v := <-ch; v {
		t.Fatal("initial level true")
	}
	b.set(true)
	b.set(false)
	b.set(true) // unread values are replaced: only the latest is seen
	if v := <-ch; !v {
		t.Fatal("latest level not delivered")
	}
	select {
	case v := <-ch:
		t.Fatalf("stale value %v delivered", v)
	default:
	}
	late, cancelLate := b.subscribe()
	if v := <-late; !v {
		t.Fatal("late subscriber did not get the current level")
	}
	cancelLate()
	if _, ok := <-late; ok {
		t.Fatal("cancel did not close the channel")
	}
	b.close()
	if v, ok := <-ch; v || !ok {
		t.Fatalf("close gave (%v, %v), want a final false", v, ok)
	}
	if _, ok := <-ch; ok {
		t.Fatal("close did not close the channel")
	}
	cancel() // after close: harmless
	if v, ok := <-mustSubscribe(b); ok {
		t.Fatalf("subscribe after close gave %v", v)
	}
}

func mustSubscribe(b *broadcaster) <-chan bool {
	ch, _ := b.subscribe()
	return ch
}

// A second node on the same DataDir fails instead of sharing the log.
func TestDataDirInUse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := Config{ID: "n1", DataDir: dir, BindAddr: "127.0.0.1:0", Logger: testLogger(t, "n1")}
	n, err := New(cfg, &listFSM{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown(context.Background()) })
	if n2, err := New(cfg, &listFSM{}); err == nil {
		_ = n2.Shutdown(context.Background())
		t.Fatal("second New on the same DataDir succeeded")
	} else if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "in use by process "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("error %q does not name the directory and its holder", err)
	}
}

package loadgen

import (
	"fmt"
	"io"
	"time"
)

// The workloads.
const (
	Uncontended = "uncontended" // every worker locks a name of its own
	Contended   = "contended"   // all workers lock one name
	RW          = "rw"          // one name, shared (readers) and exclusive (writers)
	IfAvailable = "ifavailable" // all workers try one name with ifAvailable
	Churn       = "churn"       // open a session, lock, release, close, again
	Idle        = "idle"        // many sessions that only heartbeat
	Failover    = "failover"    // kill the leader repeatedly under load
	HeldLocks   = "held"        // acquire many locks and keep them (memory)
	Snapshots   = "snapshot"    // hold many locks, run pairs, snapshot now and then
	Watch       = "watch"       // uncontended pairs while many watches follow the namespace
	Move        = "move"        // a namespace's slot moves between groups under load (RunMove)
)

// Workloads lists every workload, in the order reports use.
var Workloads = []string{Uncontended, Contended, RW, IfAvailable, Churn, Idle, Failover, HeldLocks, Flood, Snapshots, Watch, Move}

// Config describes one run.
type Config struct {
	Workload string
	Workers  int           // 1..1024
	Duration time.Duration // the measured window
	Warmup   time.Duration // run before the window, not counted
	Hold     time.Duration // how long a worker holds each lock
	// Sessions is how many sessions the workers share (worker i uses
	// session i mod Sessions); 0 means one per worker. For Idle and Held it
	// is the number of sessions to open; for Failover, if set, the number
	// of sessions speaking the protocol directly that hold a lock each
	// through the kills (the workers are not used then).
	Sessions int
	// WriteRatio is the share of exclusive requests in RW (0..1).
	WriteRatio float64
	// MaxOps bounds the run by count: it stops after this many pairs.
	MaxOps int64
	// Prefix starts every lock name, so runs do not meet each other.
	Prefix string
	// Baseline runs, before a contended or rw run, one worker locking a
	// name of its own Baseline times, to measure one commit's latency.
	Baseline int
	// Locks is how many locks Held acquires (spread over Sessions).
	Locks int
	// Trials is how many times Failover kills the leader.
	Trials int
	// Watchers is how many watches of the whole namespace Watch runs
	// (default 1000), over WatchConns clients (default 16), each client
	// its own connection to one node and each watch its own stream.
	Watchers   int
	WatchConns int
	// Progress receives a line a second (nil: none).
	Progress io.Writer
}

// Validate checks c and fills in defaults.
func (c *Config) Validate() error {
	known := false
	for _, w := range Workloads {
		known = known || w == c.Workload
	}
	switch {
	case !known:
		return fmt.Errorf("workload %q is not one of %v", c.Workload, Workloads)
	case c.Workers < 1 || c.Workers > 1024:
		return fmt.Errorf("workers %d: between 1 and 1024", c.Workers)
	case c.Duration <= 0:
		return fmt.Errorf("duration %s: must be positive", c.Duration)
	case c.Warmup < 0 || c.Hold < 0:
		return fmt.Errorf("warmup %s and hold %s must not be negative", c.Warmup, c.Hold)
	case c.Sessions < 0:
		return fmt.Errorf("sessions %d: must not be negative", c.Sessions)
	case c.WriteRatio < 0 || c.WriteRatio > 1:
		return fmt.Errorf("write ratio %g: between 0 and 1", c.WriteRatio)
	case c.Watchers < 0 || c.WatchConns < 0:
		return fmt.Errorf("watchers %d and watch connections %d must not be negative", c.Watchers, c.WatchConns)
	}
	if c.Workload == Watch {
		if c.Watchers == 0 {
			c.Watchers = 1000
		}
		if c.WatchConns == 0 {
			c.WatchConns = 16
		}
		c.WatchConns = min(c.WatchConns, c.Watchers)
		// A node lets one connection carry 256 streams (serve
		// --max-concurrent-streams); the client's session stream is one.
		if per := (c.Watchers + c.WatchConns - 1) / c.WatchConns; per > maxWatchesPerConn {
			return fmt.Errorf("%d watchers over %d connections is %d streams on one: at most %d (more connections)", c.Watchers, c.WatchConns, per, maxWatchesPerConn)
		}
	}
	if c.MaxOps <= 0 {
		c.MaxOps = 10_000_000
	}
	if c.Prefix == "" {
		c.Prefix = fmt.Sprintf("bench-%d/", time.Now().UnixNano())
	}
	if c.Workload != Failover && (c.Sessions == 0 || c.Sessions > c.Workers && c.Workload != Idle && c.Workload != HeldLocks && c.Workload != Snapshots) {
		if c.Workload == Idle {
			c.Sessions = 1000
		} else {
			c.Sessions = c.Workers
		}
	}
	if (c.Workload == HeldLocks || c.Workload == Snapshots) && c.Locks <= 0 {
		c.Locks = 100_000
	}
	if c.Trials <= 0 {
		c.Trials = 10
	}
	return nil
}

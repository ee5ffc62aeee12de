package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// hold is one lock request as the history tells it: its acquire, the
// grant, the writes, the loss and the release.
type hold struct {
	id          string
	process     int
	workload    string
	names       []string
	mode        string
	steal       bool
	ifAvailable bool
	invoke      int64
	session     uint64 // at the grant (or at the invoke)
	// outcome: granted, not-available, aborted (fail), unknown (info), or
	// "" when the history has no completion.
	outcome  string
	complete int64
	token    uint64
	err      string
	// The release: invoked at relInvoke (0: never), completed ok
	// (relOK) or unknown at relDone.
	relInvoke, relDone int64
	relOK              bool
	relErr             string // why a release's outcome is unknown
	lostAt             int64  // when the holder learned its lock ended (0: never)
	lostKind           string
	lostWhy            string
	timeout            int64 // the request's deadline, ns
	// sessionEnded is when a watch first received the end of the hold's
	// session (0: none did): the cluster had ended it by then.
	sessionEnded int64
	writes       []Op
	end          int64 // when the holder stopped believing it held the lock
	endedByPause bool  // end is when its process was paused
}

func (h *hold) granted() bool { return h.outcome == "granted" }

// jeopardy: the client gave its session up by itself (no heartbeat
// acknowledged for a TTL); the cluster may keep it, and its locks and
// requests, until it expires it.
func jeopardy(why string) bool { return strings.Contains(why, "no heartbeat acknowledged") }

// settledBy is when the cluster had certainly finished with a request
// whose outcome the client does not know (0: not known). An abort that
// the client delivered is applied before Request returns; the client
// gives an abort 5 seconds, so a request that returned sooner after its
// deadline had its abort applied. A session the cluster itself ended took
// its requests with it: one the client gave up by itself (jeopardy) too,
// once a watch received the session's end (sessionEnded).
func (h *hold) settledBy() int64 {
	switch {
	case h.outcome == "aborted" && h.timeout > 0 && h.complete-h.invoke-h.timeout < int64(4*time.Second):
		return h.complete
	case h.outcome == "unknown" && strings.Contains(h.err, "session lost") && !jeopardy(h.err):
		return h.complete
	case h.sessionEnded > 0:
		return max(h.sessionEnded, h.invoke+1)
	}
	return 0
}

// releasedBy is when the cluster had certainly taken back a lock the
// holder did not release itself (0: not known): a theft, an end of the
// session, or a loss a refused record write revealed (not-holder), that
// the cluster told the holder about, happened before it was told; a
// session the client gave up (jeopardy) ended by the time a watch
// received its end.
func (h *hold) releasedBy() int64 {
	if h.lostKind == "stolen" || h.lostKind == notHolder || (h.lostKind == "session" && !jeopardy(h.lostWhy)) {
		return h.lostAt
	}
	if h.lostKind == "session" && h.sessionEnded > 0 {
		return max(h.sessionEnded, h.complete+1)
	}
	return 0
}
func (h *hold) exclusive() bool { return h.mode != "shared" }

// history is a history analysed for the checkers.
type history struct {
	ops     []Op
	holds   []*hold // by invoke time
	byID    map[string]*hold
	writes  []Op // register events, in the register's order
	queries []queryOp
	pauses  map[int][][2]int64 // client process -> paused intervals
	heal    int64              // when the nemesis healed everything (0: never)
	last    int64              // the last timestamp
	final   []Op               // the checks of the end (process finalProcess)
	crashes []string
}

type queryOp struct {
	invoke, complete int64
	process          int
	held, pending    []QLock
	final            bool
}

// analyse groups a history (sorted by time) into holds, queries, pauses.
func analyse(ops []Op) *history {
	hs := &history{ops: ops, byID: map[string]*hold{}, pauses: map[int][][2]int64{}}
	qInv := map[int]int64{}
	sessionEnd := map[uint64]int64{}
	pauseStart := map[int]int64{}
	for _, op := range ops {
		hs.last = max(hs.last, op.Time)
		h := hs.byID[op.Hold]
		switch {
		case op.F == "watch" && op.Result == "changes":
			for _, c := range op.Changes {
				if c.Kind == "session-ended" && (sessionEnd[c.Session] == 0 || op.Time < sessionEnd[c.Session]) {
					sessionEnd[c.Session] = op.Time
				}
			}
		case op.F == "watch" || op.F == "log":
			// the watch checker's (check_watch.go)
		case op.F == "crash":
			hs.crashes = append(hs.crashes, op.Value)
		case op.Process == finalProcess && op.F != "query":
			hs.final = append(hs.final, op)
		case op.F == "acquire" && op.Type == "invoke":
			h = &hold{id: op.Hold, process: op.Process, workload: op.Workload, names: op.Names, mode: op.Mode, steal: op.Steal,
				ifAvailable: op.IfAvailable, invoke: op.Time, session: op.Session, timeout: op.TimeoutMs * 1e6}
			hs.byID[op.Hold] = h
			hs.holds = append(hs.holds, h)
		case op.F == "acquire" && h != nil:
			h.complete, h.err = op.Time, op.Error
			switch op.Type {
			case "ok":
				h.outcome = op.Result
				h.token = op.Token
				if op.Session != 0 {
					h.session = op.Session
				}
			case "fail":
				h.outcome = "aborted"
			default:
				h.outcome = "unknown"
			}
		case op.F == "release" && h != nil:
			if op.Type == "invoke" {
				h.relInvoke = op.Time
			} else {
				h.relDone, h.relOK, h.relErr = op.Time, op.Type == "ok", op.Error
			}
		case op.F == "lost" && h != nil:
			if h.lostAt == 0 {
				h.lostAt, h.lostKind, h.lostWhy = op.Time, op.Result, op.Value
			}
		case op.F == "write":
			hs.writes = append(hs.writes, op)
			if h != nil {
				h.writes = append(h.writes, op)
			}
		case op.F == "query" && op.Type == "invoke":
			qInv[op.Process] = op.Time
		case op.F == "query" && op.Type == "ok":
			hs.queries = append(hs.queries, queryOp{invoke: qInv[op.Process], complete: op.Time, process: op.Process,
				held: op.Held, pending: op.Pending, final: op.Process == finalProcess})
		case op.F == "nemesis" && op.Result == "heal":
			hs.heal = op.Time
		case op.F == "nemesis" && op.Workload == nPauseClient && op.Result == "start":
			pauseStart[op.Client] = op.Time
		case op.F == "nemesis" && op.Workload == nPauseClient && op.Result == "stop":
			hs.pauses[op.Client] = append(hs.pauses[op.Client], [2]int64{pauseStart[op.Client], op.Time})
			delete(pauseStart, op.Client)
		}
	}
	for p, start := range pauseStart {
		hs.pauses[p] = append(hs.pauses[p], [2]int64{start, math.MaxInt64})
	}
	for _, h := range hs.holds {
		h.end, h.endedByPause = hs.believedEnd(h)
		h.sessionEnded = sessionEnd[h.session]
	}
	return hs
}

// believedEnd is when the holder stopped believing it held the lock: when
// it began to release it, learned it lost it, or was paused (a paused
// process believes nothing; what it does after it resumes is the fenced
// register's business). math.MaxInt64: it never stopped.
func (hs *history) believedEnd(h *hold) (end int64, paused bool) {
	if !h.granted() {
		return 0, false
	}
	end = math.MaxInt64
	for _, t := range []int64{h.relInvoke, h.lostAt} {
		if t > 0 && t < end {
			end = t
		}
	}
	for _, p := range hs.pauses[h.process] {
		if p[0] >= h.complete && p[0] < end {
			end, paused = p[0], true
		}
	}
	return end, paused
}

// grantsOf returns the granted holds of a name, by grant time.
func (hs *history) grantsOf(name string) []*hold {
	var out []*hold
	for _, h := range hs.holds {
		if h.granted() && contains(h.names, name) {
			out = append(out, h)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].complete < out[j].complete })
	return out
}

// names lists every lock name in the history, sorted.
func (hs *history) names() []string {
	seen := map[string]bool{}
	for _, h := range hs.holds {
		for _, n := range h.names {
			seen[n] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// processOfSession maps each session id to the process that used it, from
// the operations and from the labels queries show.
func (hs *history) processOfSession() map[uint64]int {
	m := map[uint64]int{}
	for _, op := range hs.ops {
		if op.Session != 0 && op.Process > 0 {
			m[op.Session] = op.Process
		}
		for _, l := range append(op.Held, op.Pending...) {
			var p int
			if _, err := fmt.Sscanf(l.Label, "jepsen-p%d", &p); err == nil && p > 0 {
				m[l.Session] = p
			}
		}
	}
	return m
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

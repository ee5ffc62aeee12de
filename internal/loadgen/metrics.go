package loadgen

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// raftTimers are the timers of hashicorp/raft and raft-boltdb (in
// milliseconds) that explain a commit, when a node exports them on
// /metrics (go-metrics' Prometheus sink).
var raftTimers = []string{"raft_commitTime", "raft_leader_dispatchLog", "raft_boltdb_storeLogs",
	"raft_replication_appendEntries_rpc", "raft_fsm_applyBatch", "raft_rpc_appendEntries_storeLogs"}

// RaftTimers scrapes a node's /metrics (httpAddr host:port) and returns,
// per raft timer it finds, its p50 and p99 in milliseconds. Nil when the
// node has no such endpoint.
func RaftTimers(ctx context.Context, httpAddr string) map[string][2]float64 {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/metrics", nil)
	if err != nil {
		return nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	out := map[string][2]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, t := range raftTimers {
			i := strings.Index(line, t+"{")
			if i < 0 || strings.HasPrefix(line, "#") {
				continue
			}
			q := -1
			switch {
			case strings.Contains(line, `quantile="0.5"`):
				q = 0
			case strings.Contains(line, `quantile="0.99"`):
				q = 1
			}
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if q < 0 || err != nil || v != v { // NaN: no sample in the window
				continue
			}
			e := out[t]
			e[q] = v
			out[t] = e
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

//go:build divergencetest

package raftnode

import (
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// THIS BUILD PLANTS A DIVERGENCE ON PURPOSE. With the build tag
// divergencetest and LOCKCLUSTER_TEST_DIVERGE=ID:INDEX in the environment,
// the node whose raft ID is ID (ID/G: its replica of group G ≥ 1) hashes the first command it applies at or
// after INDEX as if its data were different: a replica that applied
// something the others did not. Tests use it to show that the next
// checkpoint fences the replica. Never ship a binary built with this tag.
func plantDivergence(id string, logger hclog.Logger) func(*raft.Log) []byte {
	spec := os.Getenv("LOCKCLUSTER_TEST_DIVERGE")
	target, at, ok := strings.Cut(spec, ":")
	index, err := strconv.ParseUint(at, 10, 64)
	if !ok || err != nil || target != id {
		return nil
	}
	var once sync.Once
	return func(l *raft.Log) []byte {
		planted := false
		if l.Index >= index && l.Type == raft.LogCommand {
			once.Do(func() { planted = true })
		}
		if !planted {
			return l.Data
		}
		logger.Warn("divergencetest: planting a divergence", "index", l.Index)
		return append([]byte("planted:"), l.Data...)
	}
}

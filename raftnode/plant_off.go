//go:build !divergencetest

package raftnode

import (
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// plantDivergence is nil outside builds with the divergencetest tag.
func plantDivergence(string, hclog.Logger) func(*raft.Log) []byte { return nil }

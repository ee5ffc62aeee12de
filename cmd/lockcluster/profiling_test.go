package main

import (
	"strings"
	"testing"
)

// The block and mutex profiles need the profiler, and refuse a negative
// setting, naming the values given.
func TestProfilingSettings(t *testing.T) {
	for _, c := range []struct {
		pprof        bool
		block, mutex int64
		want         string
	}{
		{false, 0, 0, ""},
		{true, 0, 0, ""},
		{false, 1000, 0, "--block-profile-rate=1000 --mutex-profile-fraction=0: the profiles are served by --enable-pprof, which is off"},
		{true, -1, 0, "--block-profile-rate=-1"},
		{true, 0, -5, "--mutex-profile-fraction=-5: want 0 (off) or a positive number"},
	} {
		cfg := defaultServeConfig()
		cfg.pprof, cfg.blockProfileRate, cfg.mutexProfileFraction = c.pprof, c.block, c.mutex
		err := cfg.setProfiling()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("pprof=%v block=%d mutex=%d: %v, want %q", c.pprof, c.block, c.mutex, err, c.want)
		}
	}
}

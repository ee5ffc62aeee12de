package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lockcluster/lockcluster/fsm"
)

func TestBuildInfo(t *testing.T) {
	old := Build
	defer func() { Build = old }()
	Build = BuildInfo{Version: "v1.2.3", Revision: "abc123", GoVersion: "go1.99"}
	m := New(fsm.New())
	want := `
# HELP lockcluster_build_info A metric with a constant '1' value labeled by version, revision and goversion from which lockcluster was built.
# TYPE lockcluster_build_info gauge
lockcluster_build_info{goversion="go1.99",revision="abc123",version="v1.2.3"} 1
`
	if err := testutil.GatherAndCompare(m.registry(), strings.NewReader(want), "lockcluster_build_info"); err != nil {
		t.Fatal(err)
	}
}

package metrics

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/version"
)

func TestBuildInfo(t *testing.T) {
	b := version.Current()
	m := New(fsm.New())
	want := fmt.Sprintf(`
# HELP lockcluster_build_info A metric with a constant '1' value labeled by version, revision and goversion from which lockcluster was built.
# TYPE lockcluster_build_info gauge
lockcluster_build_info{goversion=%q,revision=%q,version=%q} 1
`, b.GoVersion, b.Revision, b.Version)
	if err := testutil.GatherAndCompare(m.registry(), strings.NewReader(want), "lockcluster_build_info"); err != nil {
		t.Fatal(err)
	}
}

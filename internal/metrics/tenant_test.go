package metrics

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lockcluster/lockcluster/fsm"
)

// Session expiries are counted per namespace, bounded as the refusals are:
// the first maxLimitNamespaces namespaces with an expiry are named, the
// rest count under "". A namespace whose last session expired is named
// all the same (it was real), and the expiries' bound is their own: the
// refusals' namespaces do not use it up.
func TestExpiriesBoundTheirNamespaces(t *testing.T) {
	h := newMachine(t)
	expire := func(ns string) {
		t.Helper()
		s := h.open(ns)
		h.apply(&fsm.ExpireSession{Session: s})
	}
	h.open("refused")
	h.met.LimitRefused("refused", "rate")
	expire("tenant")
	expire("tenant")
	if got := counter(t, h.met.rec.expiries, "tenant"); got != 2 {
		t.Errorf("tenant's expiries: %v, want 2 (its sessions are gone, the namespace was real)", got)
	}
	for i := range maxLimitNamespaces + 20 {
		expire(fmt.Sprintf("ns-%d", i))
	}
	// tenant and 99 more named, and "" for the last 21.
	if n := testutil.CollectAndCount(h.met.rec.expiries); n != maxLimitNamespaces+1 {
		t.Errorf("%d series of expiries, want %d", n, maxLimitNamespaces+1)
	}
	if got := counter(t, h.met.rec.expiries, ""); got != 21 {
		t.Errorf("expiries past the bound under \"\": %v, want 21", got)
	}
	expire("tenant")
	if got := counter(t, h.met.rec.expiries, "tenant"); got != 3 {
		t.Errorf("tenant's expiries after the bound: %v, want 3", got)
	}
	// The refusals' bound is untouched by the expiries: a namespace with
	// sessions is still named there.
	h.open("later")
	h.met.LimitRefused("later", "credential")
	if got := counter(t, h.met.limits.refusals, "later", "credential"); got != 1 {
		t.Errorf("later's credential refusals: %v, want 1", got)
	}
}

// lockcluster_last_backup_timestamp_seconds is 0 until this node serves a
// backup, then when it last did.
func TestBackupTimestamp(t *testing.T) {
	h := newMachine(t)
	if got := testutil.ToFloat64(h.met.backup); got != 0 {
		t.Fatalf("before any backup: %v, want 0", got)
	}
	at := time.Unix(1_700_000_000, 500_000_000)
	h.met.BackupSaved(at)
	h.met.BackupSaved(at.Add(-time.Hour)) // as served: the last one counts
	want := `
# HELP lockcluster_last_backup_timestamp_seconds When this node last served a SaveSnapshot (lockcluster snapshot save, an online backup) to its end, as the node the client called: the leader that encoded it or a follower that relayed the leader's stream (Unix time); 0 if it has not since it started. Take the max over the nodes.
# TYPE lockcluster_last_backup_timestamp_seconds gauge
lockcluster_last_backup_timestamp_seconds 1.6999964005e+09
`
	if err := testutil.GatherAndCompare(h.met.registry(), strings.NewReader(want), "lockcluster_last_backup_timestamp_seconds"); err != nil {
		t.Error(err)
	}
}

// unknownSpace is a replica whose file system's space cannot be read.
type unknownSpace struct{ fakeHealth }

func (unknownSpace) DiskSpace() (uint64, uint64, bool) { return 0, 0, false }

// The log's disk: free and size of its file system and the bytes of its
// files, labelled with the log's directory; free and size are left out
// where the space is unknown (a 0 would read as a full disk).
func TestDiskGauges(t *testing.T) {
	names := []string{"lockcluster_disk_free_bytes", "lockcluster_disk_size_bytes", "lockcluster_log_bytes"}
	h := newMachine(t)
	h.met.Health(fakeHealth{})
	fams, err := h.met.registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got[f.GetName()] = fmt.Sprintf("%s %s %v", f.GetType(), strings.Join(labels, ","), m.GetGauge().GetValue())
		}
	}
	for name, want := range map[string]string{
		names[0]: "GAUGE path=/var/lib/lockcluster/wal 1.073741824e+09",
		names[1]: "GAUGE path=/var/lib/lockcluster/wal 4.294967296e+09",
		names[2]: "GAUGE path=/var/lib/lockcluster/wal 6.7108864e+07",
	} {
		if got[name] != want {
			t.Errorf("%s: %q, want %q", name, got[name], want)
		}
	}
	problems, err := testutil.GatherAndLint(h.met.registry(), names...)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}

	h = newMachine(t)
	h.met.Health(unknownSpace{})
	for name, want := range map[string]int{names[0]: 0, names[1]: 0, names[2]: 1} {
		if n, err := testutil.GatherAndCount(h.met.registry(), name); err != nil || n != want {
			t.Errorf("space unknown: %d series of %s (%v), want %d", n, name, err, want)
		}
	}
}

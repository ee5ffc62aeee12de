package watchhist

import (
	"strconv"
	"testing"

	"github.com/lockcluster/lockcluster/fsm"
)

// BenchmarkApplyPair measures what the watch history costs a node per
// lock + release pair with no watcher: the machine applies the two
// entries, with and without collecting their changes, and the history
// records them as the node's raft adapter does. The numbers are in
// docs/benchmarks.md.
func BenchmarkApplyPair(b *testing.B) {
	for _, keep := range []bool{false, true} {
		b.Run("changes="+strconv.FormatBool(keep), func(b *testing.B) {
			m := fsm.New()
			m.KeepChanges(keep)
			h := New(0)
			var idx uint64
			apply := func(c fsm.Command) fsm.Applied {
				idx++
				ap := m.Apply(idx, fsm.Entry{Time: 1, Cmd: c})
				if ap.Result.Err != nil {
					b.Fatal(ap.Result.Err)
				}
				if keep {
					h.Append(idx, 1, ap.Changes)
				}
				return ap
			}
			const sessions = 64
			ids := make([]uint64, sessions)
			names := make([]string, sessions)
			for i := range ids {
				ids[i] = apply(&fsm.OpenSession{Namespace: "default", TTL: 10e9}).Result.Session
				names[i] = "resource-" + strconv.Itoa(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				s := i % sessions
				id := uint64(i/sessions + 1)
				apply(&fsm.Request{Session: ids[s], Namespace: "default", RequestID: id, Names: names[s : s+1], AckBelow: id})
				apply(&fsm.Release{Session: ids[s], Namespace: "default", RequestID: id, AckBelow: id})
			}
		})
	}
}

package metrics

import "github.com/prometheus/client_golang/prometheus"

// refusalReasons are the reasons internal/server tells Refused (its
// RefusalReasons; not imported, to keep this package off the server's):
// their series exist at zero from the start.
var refusalReasons = []string{"no_credential", "namespace", "admin", "session_secret"}

func newRefused() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lockcluster_refused_calls_total",
		Help: "Calls and session streams this node refused for their credentials, by reason: no_credential (none presented), namespace (not granted to the credential), admin (a cluster operation without an admin credential), session_secret (a wrong or missing session secret). Every refusal counts, also those the audit log only summarises.",
	}, []string{"reason"})
	for _, r := range refusalReasons {
		c.WithLabelValues(r)
	}
	return c
}

// Refused implements internal/server's Observer: it counts a call refused
// for its credentials, on the node the client called.
func (m *Metrics) Refused(reason string) { m.refused.WithLabelValues(reason).Inc() }

package metrics

import "github.com/prometheus/client_golang/prometheus"

// Connections registers the client API's connection metrics:
// lockcluster_api_connections, the connections open on the node's gRPC
// port (open says how many), and
// lockcluster_api_connections_refused_total, those it closed at once
// because their remote address already had as many open as a node allows
// one address (--max-conns-per-ip). It returns the function that counts a
// refusal. Call it once, when the node starts.
func (m *Metrics) Connections(open func() int) (refused func()) {
	c := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lockcluster_api_connections_refused_total",
		Help: "Client API connections this node closed as soon as it accepted them, because their remote address already had --max-conns-per-ip open.",
	})
	m.reg.MustRegister(c, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lockcluster_api_connections",
		Help: "Client API (gRPC) connections open on this node.",
	}, func() float64 { return float64(open()) }))
	return c.Inc
}

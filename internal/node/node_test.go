package node_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/lockcluster/lockcluster/internal/node"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
)

// grpcurl and Kubernetes-style probes work against a node: server
// reflection lists the services, gRPC health says SERVING, and /livez and
// /readyz answer.
func TestHealthReflectionAndProbes(t *testing.T) {
	c := nodetest.Start(t, 1, nodetest.Options{Quiet: true})
	n := c.Nodes[0]
	cc := rawConn(t, n.GRPCAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c.WaitFor(5*time.Second, "health SERVING", func() bool {
		r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: "lockcluster.v1.Locks"})
		return err == nil && r.Status == healthpb.HealthCheckResponse_SERVING
	})

	st, err := rpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, s := range resp.GetListServicesResponse().GetService() {
		found[s.Name] = true
	}
	for _, want := range []string{"lockcluster.v1.Locks", "lockcluster.v1.Cluster", "grpc.health.v1.Health"} {
		if !found[want] {
			t.Errorf("reflection does not list %s: %v", want, found)
		}
	}

	for _, path := range []string{"/livez", "/readyz"} {
		r, err := http.Get("http://" + n.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != 200 {
			t.Errorf("%s: %d %s", path, r.StatusCode, body)
		}
	}
}

// Go's profiler is served only when asked for (serve --enable-pprof).
func TestPprofOnlyWhenEnabled(t *testing.T) {
	for _, on := range []bool{false, true} {
		c := nodetest.Start(t, 1, nodetest.Options{Quiet: true, Node: func(cfg *node.Config) { cfg.EnablePprof = on }})
		r, err := http.Get("http://" + c.Nodes[0].HTTPAddr() + "/debug/pprof/cmdline")
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if want := map[bool]int{false: 404, true: 200}[on]; r.StatusCode != want {
			t.Errorf("EnablePprof %v: GET /debug/pprof/cmdline: %d, want %d", on, r.StatusCode, want)
		}
	}
}

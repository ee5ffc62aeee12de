package server

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/auth"
	"github.com/lockcluster/lockcluster/internal/rpcerr"
	"github.com/lockcluster/lockcluster/internal/testutil"
)

// jsonLines are the JSON log lines written to buf.
func jsonLines(t *testing.T, buf *testutil.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func pacerForTest(interval time.Duration) (*refusalPacer, *testutil.Buffer) {
	buf := &testutil.Buffer{}
	return newRefusalPacer(interval, hclog.New(&hclog.LoggerOptions{Output: buf, JSONFormat: true})), buf
}

// A peer's first refusals of an interval are written in full, the rest
// counted into one summary line when the interval is over; a peer that
// goes on being refused gets one line an interval; one quiet for an
// interval starts afresh. The peer is its IP address, whatever the port.
// The clock is the test's: nothing sleeps.
func TestRefusalPacerSummarisesPerPeer(t *testing.T) {
	p, buf := pacerForTest(10 * time.Second)
	t0 := time.Unix(1000, 0)
	sample := refusalSample{method: "/lockcluster.v1.Locks/Query", namespace: "ns", code: "Unauthenticated", reason: "no"}
	full := 0
	for i := 0; i < 1000; i++ {
		addr := net.JoinHostPort("10.0.0.1", strconv.Itoa(40000+i)) // a new connection each time
		if p.admit(t0.Add(time.Duration(i)*time.Millisecond), addr, sample) {
			full++
		}
	}
	if full != auditRefusalBurst {
		t.Fatalf("%d of 1000 refusals from one peer written in full, want %d", full, auditRefusalBurst)
	}
	if !p.admit(t0, "10.0.0.2:1", sample) {
		t.Fatal("another peer's first refusal was not written in full")
	}
	p.flush(t0.Add(5*time.Second), false)
	if got := buf.String(); got != "" {
		t.Fatalf("a summary before the interval is over: %s", got)
	}
	p.flush(t0.Add(10*time.Second), false)
	lines := jsonLines(t, buf)
	if len(lines) != 1 || lines[0]["event"] != "refused-credential-summary" || lines[0]["peer"] != "10.0.0.1" ||
		lines[0]["refusals"] != float64(1000-auditRefusalBurst) || lines[0]["last_namespace"] != "ns" || lines[0]["last_method"] != sample.method {
		t.Fatalf("after the interval: %v, want one summary of peer 10.0.0.1's %d counted refusals", lines, 1000-auditRefusalBurst)
	}
	if _, ok := p.peers["10.0.0.2"]; ok {
		t.Error("a peer with nothing counted is still tracked after its interval")
	}
	// Still refused: summarised, not written.
	if p.admit(t0.Add(11*time.Second), "10.0.0.1:9", sample) {
		t.Error("a peer refused through the last interval was written in full again")
	}
	p.flush(t0.Add(20*time.Second), false)
	if lines := jsonLines(t, buf); len(lines) != 2 || lines[1]["refusals"] != float64(1) {
		t.Fatalf("second interval: %v, want a summary of 1 refusal", lines)
	}
	// Quiet for an interval: forgotten, and written in full again.
	p.flush(t0.Add(30*time.Second), false)
	if len(p.peers) != 0 {
		t.Errorf("%d peers tracked after a quiet interval", len(p.peers))
	}
	if !p.admit(t0.Add(31*time.Second), "10.0.0.1:9", sample) {
		t.Error("a peer quiet for an interval is not written in full again")
	}
	if n := len(jsonLines(t, buf)); n != 2 {
		t.Errorf("%d lines, want 2", n)
	}
}

// Past auditRefusalPeers peers, refusals are counted together: the map
// stays bounded, and one line tells of the others.
func TestRefusalPacerIsBounded(t *testing.T) {
	p, buf := pacerForTest(time.Second)
	t0 := time.Unix(1000, 0)
	const extra = 100
	full := 0
	for i := 0; i < auditRefusalPeers+extra; i++ {
		addr := net.JoinHostPort(net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)).String(), "5")
		if p.admit(t0, addr, refusalSample{method: "m", peer: addr}) {
			full++
		}
	}
	if full != auditRefusalPeers || len(p.peers) != auditRefusalPeers {
		t.Fatalf("%d written in full, %d peers tracked; want %d and %d", full, len(p.peers), auditRefusalPeers, auditRefusalPeers)
	}
	p.flush(t0.Add(time.Second), false)
	lines := jsonLines(t, buf)
	if len(lines) != 1 || lines[0]["peer"] != otherPeers || lines[0]["refusals"] != float64(extra) || lines[0]["last_peer"] == "" {
		t.Fatalf("%v: want one summary of the %d refusals from peers past the bound", lines, extra)
	}
	if len(p.peers) != 0 {
		t.Errorf("%d peers still tracked after a quiet interval", len(p.peers))
	}
}

// When the server stops, what was counted is written.
func TestRefusalPacerWritesTheRestAtStop(t *testing.T) {
	p, buf := pacerForTest(time.Hour)
	now := time.Unix(1000, 0)
	for i := 0; i < auditRefusalBurst+3; i++ {
		p.admit(now, "10.0.0.1:1", refusalSample{method: "m"})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.run(ctx, func() time.Time { return now })
	if lines := jsonLines(t, buf); len(lines) != 1 || lines[0]["refusals"] != float64(3) {
		t.Fatalf("at stop: %v, want a summary of 3 refusals", lines)
	}
}

type refusedObserver struct {
	nopObserver
	mu      sync.Mutex
	reasons map[string]int
}

func (o *refusedObserver) Refused(r string) { o.mu.Lock(); o.reasons[r]++; o.mu.Unlock() }

// An audit line holds at most a bounded, escaped part of what the caller
// sent, in the JSON format and in the text one: a megabyte namespace or
// lock name, a newline, a terminal escape make one short line. Each
// refusal is counted by reason.
func TestAuditLineIsBoundedAndEscaped(t *testing.T) {
	hostile := strings.Repeat("n", 1<<20) // cut long before the newline below
	forged := "ns\n2030-01-01T00:00:00.000Z [INFO]  lockcluster.api.audit: audit: event=FORGED\x1b[2J"
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			buf := &testutil.Buffer{}
			obs := &refusedObserver{reasons: map[string]int{}}
			s := New(Config{Machine: fsm.New(), Observer: obs,
				Logger: hclog.New(&hclog.LoggerOptions{Name: "lockcluster", Output: buf, JSONFormat: format == "json"})})
			a := s.callAudit
			ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 9), Port: 1}})
			for _, ns := range []string{hostile, forged} {
				// As auth refuses it, and as a handler refuses a secret.
				a.refusal(ctx, "/lockcluster.v1.Locks/Query", &pb.QueryRequest{Namespace: ns}, authRefusal(t, ns))
				a.refusal(ctx, "/lockcluster.v1.Locks/Release", &pb.ReleaseRequest{Namespace: ns, SessionId: 7}, rpcerr.PermissionDenied("the session secret was refused"))
			}
			steal := func(context.Context, any) (any, error) {
				return &pb.LockResponse{Status: pb.Status_STATUS_GRANTED}, nil
			}
			if _, err := a.unary(ctx, &pb.LockRequest{Namespace: forged, SessionId: 7, Names: []string{hostile, forged}, Steal: true},
				&grpc.UnaryServerInfo{FullMethod: "/lockcluster.v1.Locks/Request"}, steal); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != 5 {
				t.Fatalf("%d lines, want 5 (4 refusals, 1 steal):\n%.3000s", len(lines), out)
			}
			for _, l := range lines {
				if len(l) > 2500 {
					t.Errorf("a line of %d bytes: %.300s…", len(l), l)
				}
				if !strings.Contains(l, "audit") || strings.HasPrefix(l, "2030") || strings.Contains(l, "\x1b") {
					t.Errorf("a line not the auditor's own, or with a raw escape: %q", l)
				}
				if strings.Contains(l, "FORGED") && !strings.Contains(l, `ns\\n2030`) && !strings.Contains(l, `ns\n2030`) {
					t.Errorf("the forged text without its escaped newline: %q", l)
				}
			}
			if !strings.Contains(out, "…(+1048448 bytes)") {
				t.Errorf("no line says how much of the namespace was cut:\n%.2000s", out)
			}
			if t.Failed() || testing.Verbose() {
				t.Log(out)
			}
			if obs.reasons[auth.ReasonNamespace] != 2 || obs.reasons[reasonSessionSecret] != 2 {
				t.Errorf("refusals by reason %v, want 2 namespace and 2 session_secret", obs.reasons)
			}
		})
	}
}

// authRefusal is auth's refusal of namespace ns to a credential that does
// not grant it.
func authRefusal(t *testing.T, ns string) error {
	t.Helper()
	a, err := auth.New(auth.Config{AdminTokens: []string{"admin-token-0123456789"}, Namespaces: map[string]auth.Namespace{"other": {Tokens: []string{"other-token-0123456789"}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer other-token-0123456789"))
	_, err = a.Unary()(ctx, &pb.QueryRequest{Namespace: ns}, &grpc.UnaryServerInfo{FullMethod: "/lockcluster.v1.Locks/Query"},
		func(context.Context, any) (any, error) { return nil, nil })
	if auth.RefusalReason(err) != auth.ReasonNamespace {
		t.Fatalf("auth answered %v, want a namespace refusal", err)
	}
	return err
}

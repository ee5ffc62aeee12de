package node_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/auth"
	"github.com/lockcluster/lockcluster/internal/node"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
	"github.com/lockcluster/lockcluster/internal/server"
	"github.com/lockcluster/lockcluster/internal/testutil"
)

// A stranger cannot fill the disk through the audit log, nor forge a line
// in it (issue 24): with auth on, 5 calls with a megabyte namespace and
// 20,000 refused calls naming made-up sessions write less than 100 KB of
// log; what a caller sent never breaks a line (a namespace or a session
// label with a newline and a terminal escape stays on its line, escaped);
// and every refusal is still accounted for, in a line of its own or in a
// peer's count, and in lockcluster_refused_calls_total.
//
// The log is hclog's text format, the default: the one where a newline in
// a value becomes a continuation line ("  | ...").
func TestAuditLogFloodIsBounded(t *testing.T) {
	const (
		admin   = "admin-token-0123456789abcdef"
		user    = "user-token-0123456789abcdef"
		flood   = 20_000 // no credential, made-up sessions
		secrets = 20     // the namespace's credential, a made-up session's secret
		workers = 32
		forge   = "\n2030-01-01T00:00:00.000Z [INFO]  lockcluster.api.audit: audit: event=FORGED\x1b[2J"
	)
	logs := &testutil.Buffer{}
	c := nodetest.Start(t, 1, nodetest.Options{Quiet: true, Node: func(cfg *node.Config) {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "lockcluster", Output: logs, Level: hclog.Info})
		cfg.Auth = auth.Config{AdminTokens: []string{admin}, Namespaces: map[string]auth.Namespace{"ns": {Tokens: []string{user}}}}
		// Short, so that the test sees the counts soon; the bound is the
		// same whatever the interval: a few lines per peer per interval.
		cfg.Server.AuditRefusalInterval = 500 * time.Millisecond
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lc := pb.NewLocksClient(rawConn(t, c.Addrs()[0]))
	as := func(token string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	refused := 0
	refuse := func(what string, err error) {
		t.Helper()
		if c := status.Code(err); c != codes.PermissionDenied && c != codes.Unauthenticated {
			t.Fatalf("%s: %v, want a refusal", what, err)
		}
		refused++
	}

	// What a caller chose, with a newline and a terminal escape in it: a
	// namespace, and the label of a session a refusal names.
	s, err := lc.OpenSession(as(user), &pb.OpenSessionRequest{Namespace: "ns", Label: "evil" + forge, Ttl: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = lc.Release(as(user), &pb.ReleaseRequest{Namespace: "ns", SessionId: s.SessionId, SessionSecret: []byte("not-the-secret-0123456789"), RequestId: 1})
	refuse("a wrong secret for the labelled session", err)
	_, err = lc.Query(ctx, &pb.QueryRequest{Namespace: "ns" + forge})
	refuse("a namespace with a newline", err)
	// Five megabyte namespaces.
	huge := strings.Repeat("n", 1<<20)
	for i := 0; i < 5; i++ {
		_, err = lc.Query(ctx, &pb.QueryRequest{Namespace: huge})
		refuse("a 1 MB namespace", err)
	}

	// The flood: calls without a credential, and with the namespace's
	// credential and a made-up session's secret, from many goroutines.
	var next, bad atomic.Int64
	var firstBad atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > flood+secrets {
					return
				}
				id := rand.Uint64N(1<<40) + 1<<40 // made up
				var err error
				if i <= flood {
					_, err = lc.Release(ctx, &pb.ReleaseRequest{Namespace: "ns", SessionId: id, SessionSecret: []byte("made-up-secret-0123456789"), RequestId: 1})
				} else {
					_, err = lc.Abort(as(user), &pb.AbortRequest{Namespace: "ns", SessionId: id, SessionSecret: []byte("made-up-secret-0123456789"), RequestId: 1})
				}
				if c := status.Code(err); c != codes.Unauthenticated && c != codes.PermissionDenied {
					bad.Add(1)
					firstBad.CompareAndSwap(nil, fmt.Sprint(err))
				}
			}
		}()
	}
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d flood calls not refused, the first: %v", n, firstBad.Load())
	}
	refused += flood + secrets
	t.Logf("%d refused calls in %s", flood+secrets, time.Since(start).Round(time.Millisecond))

	// Every refusal is accounted for: a refused-credential line each, or
	// a count in a summary line.
	full := regexp.MustCompile(`event=refused-credential( |$)`)
	summary := regexp.MustCompile(`event=refused-credential-summary .*refusals=([0-9]+)`)
	accounted := func() (lines, counted int) {
		for _, l := range strings.Split(logs.String(), "\n") {
			if full.MatchString(l) {
				lines++
			} else if m := summary.FindStringSubmatch(l); m != nil {
				n, _ := strconv.Atoi(m[1])
				counted += n
			}
		}
		return lines, counted
	}
	testutil.Eventually(t, 15*time.Second, "every refusal in the audit log, in full or counted", func() bool {
		lines, counted := accounted()
		return lines+counted >= refused
	})
	lines, counted := accounted()
	if lines+counted != refused {
		t.Errorf("%d refusals in full and %d counted, want %d in all", lines, counted, refused)
	}
	if counted == 0 {
		t.Error("no summary line counts the flood")
	}

	all := logs.String()
	t.Logf("log: %d bytes, %d lines; %d refusals in full, %d counted", len(all), strings.Count(all, "\n"), lines, counted)
	if len(all) >= 100_000 {
		t.Errorf("the log holds %d bytes after the flood, want less than 100 KB", len(all))
	}
	for _, l := range strings.Split(all, "\n") {
		if len(l) > 4096 {
			t.Errorf("a log line of %d bytes: %.200s…", len(l), l)
		}
		// hclog writes a value with a newline as continuation lines
		// ("  | "); a forged line would start with the forged text.
		if strings.HasPrefix(l, "  |") || strings.HasPrefix(l, "2030-") || strings.Contains(l, "\x1b") {
			t.Errorf("a line made of what a caller sent: %.300q", l)
		}
		if strings.Contains(l, "FORGED") && !strings.Contains(l, `\n2030-`) {
			t.Errorf("the caller's text without its newline escaped: %.300q", l)
		}
	}
	if !strings.Contains(all, `client_label="evil\n2030-`) {
		t.Error("no line names the labelled session, escaped")
	}
	if !strings.Contains(all, "…(+1048448 bytes)") {
		t.Error("no line says how much of the megabyte namespace was cut")
	}

	// The metrics count every refusal, by reason.
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+c.Nodes[0].HTTPAddr()+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	metric := func(reason string) int {
		m := regexp.MustCompile(`(?m)^lockcluster_refused_calls_total\{reason="` + reason + `"\} ([0-9]+)$`).FindSubmatch(body)
		if m == nil {
			t.Errorf("no lockcluster_refused_calls_total series for reason %s", reason)
			return -1
		}
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	for _, r := range server.RefusalReasons {
		metric(r)
	}
	if got, want := metric(auth.ReasonNoCredential), flood+6; got != want {
		t.Errorf("lockcluster_refused_calls_total{reason=no_credential} = %d, want %d", got, want)
	}
	if got, want := metric("session_secret"), secrets+1; got != want {
		t.Errorf("lockcluster_refused_calls_total{reason=session_secret} = %d, want %d", got, want)
	}
}

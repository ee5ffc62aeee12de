package deploy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster/internal/proccluster"
	"github.com/lockcluster/lockcluster/internal/testutil"
)

// These helpers run the deploy files for real: the binary built from
// ./cmd/lockcluster, started with the arguments, variables and files a
// unit or manifest gives it, its paths moved into a temporary directory
// and its addresses onto loopback ports picked free.

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveBuilds()
	os.Exit(code)
}

// binary builds ./cmd/lockcluster once per test run.
func binary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: runs lockcluster serve processes")
	}
	return testutil.Build(t, "../cmd/lockcluster")
}

// freePort is a loopback port nothing listens on now, from proccluster's
// range, where neither ephemeral ports nor other tests' nodes take it.
func freePort(t *testing.T) string {
	t.Helper()
	addr, err := proccluster.FreeAddr("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// addrMap rewrites the addresses of deploy files onto loopback: each
// (host, port) pair gets a free 127.0.0.1 port.
type addrMap struct {
	t    *testing.T
	host map[string]string // "host:port" -> "127.0.0.1:free"
}

func newAddrMap(t *testing.T) *addrMap { return &addrMap{t: t, host: map[string]string{}} }

func (m *addrMap) get(hostport string) string {
	if a, ok := m.host[hostport]; ok {
		return a
	}
	a := freePort(m.t)
	m.host[hostport] = a
	return a
}

// rewrite replaces every match of re (a host:port) in s, its bind address
// 0.0.0.0:P standing for self:P.
func (m *addrMap) rewrite(s string, re *regexp.Regexp, self string) string {
	s = regexp.MustCompile(`0\.0\.0\.0:(\d+)`).ReplaceAllStringFunc(s, func(a string) string {
		return m.get(self + ":" + strings.TrimPrefix(a, "0.0.0.0:"))
	})
	return re.ReplaceAllStringFunc(s, m.get)
}

// proc is one running lockcluster serve.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// startProc starts bin with args, env (nothing else from the test's
// environment) and working directory dir, its output in logFile.
func startProc(t *testing.T, name, bin string, args, env []string, dir, logFile string) *proc {
	t.Helper()
	f, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = env, dir, f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("%s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logFile, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
			return
		default:
		}
		cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("--- %s log:\n%s", name, b)
		}
	})
	return p
}

// stop sends SIGTERM and waits up to limit for a clean exit (status 0).
func (p *proc) stop(t *testing.T, limit time.Duration) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(limit):
		p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("%s did not stop within %s of SIGTERM:\n%s", p.name, limit, p.logText())
	}
	if p.err != nil {
		t.Fatalf("%s after SIGTERM: %v, want exit status 0:\n%s", p.name, p.err, p.logText())
	}
}

func (p *proc) logText() string { b, _ := os.ReadFile(p.log); return string(b) }

// waitHTTP polls url until it answers 200, failing if p exits first.
func waitHTTP(t *testing.T, p *proc, client *http.Client, url string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	last := ""
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			t.Fatalf("%s exited (%v) before %s answered 200:\n%s", p.name, p.err, url, p.logText())
		default:
		}
		resp, err := client.Get(url)
		if err == nil {
			body := new(bytes.Buffer)
			body.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(body.String()))
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: %s did not answer 200 within %s (last: %s):\n%s", p.name, url, limit, last, p.logText())
}

// httpClient is the client of a probe: for https, one that trusts caFile
// (empty: one that verifies nothing, as the kubelet's probes do).
func httpClient(t *testing.T, caFile string) *http.Client {
	t.Helper()
	cfg := &tls.Config{InsecureSkipVerify: true}
	if caFile != "" {
		b, err := os.ReadFile(caFile)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(b)
		cfg = &tls.Config{RootCAs: pool}
	}
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// cli runs a lockcluster client command; it fails the test on an error.
func cli(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("lockcluster %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// makeCerts makes a CA in dir and a certificate for each name, serving
// hosts(name), with the binary's tls commands (README, Production).
func makeCerts(t *testing.T, bin, dir string, names []string, hosts func(string) string) {
	t.Helper()
	cli(t, bin, "tls", "ca", "create", "--dir", dir)
	for _, n := range names {
		cli(t, bin, "tls", "cert", "create", n, "--ca-dir", dir, "--hosts", hosts(n))
	}
}

type member struct {
	ID     string `json:"id"`
	Leader bool   `json:"leader"`
}

type status struct {
	NodeID       string `json:"nodeId"`
	LeaderID     string `json:"leaderId"`
	AppliedIndex uint64 `json:"appliedIndex"`
	Err          string `json:"error"`
}

// oneCluster waits until the endpoints agree: members lists exactly ids
// with one leader, and every endpoint's status names that leader and has
// applied at least minApplied. It returns the leader and the least
// applied index.
func oneCluster(t *testing.T, bin string, auth []string, endpoints []string, ids []string, minApplied uint64, limit time.Duration) (string, uint64) {
	t.Helper()
	deadline := time.Now().Add(limit)
	why := ""
	for time.Now().Before(deadline) {
		leader, applied, err := clusterView(bin, auth, endpoints, ids, minApplied)
		if err == nil {
			return leader, applied
		}
		why = err.Error()
		time.Sleep(300 * time.Millisecond)
	}
	t.Fatalf("the nodes did not form one cluster of %v within %s: %s", ids, limit, why)
	return "", 0
}

func clusterView(bin string, auth, endpoints, ids []string, minApplied uint64) (string, uint64, error) {
	args := append([]string{"members", "-o", "json", "--addr", strings.Join(endpoints, ",")}, auth...)
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		return "", 0, fmt.Errorf("members: %v", err)
	}
	var ms []member
	if err := json.Unmarshal(out, &ms); err != nil {
		return "", 0, fmt.Errorf("members: %v: %s", err, out)
	}
	leader := ""
	var got []string
	for _, m := range ms {
		got = append(got, m.ID)
		if m.Leader {
			leader = m.ID
		}
	}
	sort.Strings(got)
	want := slices.Sorted(slices.Values(ids))
	if !slices.Equal(got, want) || leader == "" {
		return "", 0, fmt.Errorf("members %s", out)
	}
	args = append([]string{"status", "-o", "json", "--addr", strings.Join(endpoints, ",")}, auth...)
	out, _ = exec.Command(bin, args...).Output() // exits 1 while a node lags
	var sts []status
	if err := json.Unmarshal(out, &sts); err != nil {
		return "", 0, fmt.Errorf("status: %v: %s", err, out)
	}
	least := uint64(0)
	for i, s := range sts {
		if s.Err != "" || s.LeaderID != leader || s.AppliedIndex < minApplied {
			return "", 0, fmt.Errorf("status %s", out)
		}
		if i == 0 || s.AppliedIndex < least {
			least = s.AppliedIndex
		}
	}
	if len(sts) != len(endpoints) {
		return "", 0, fmt.Errorf("status %s", out)
	}
	return leader, least, nil
}

package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
	"github.com/lockcluster/lockcluster/internal/web"
)

// locked starts a node where namespace billing has alpha holding invoices
// (token returned) and beta waiting for it, and reports shared holders in
// namespace reports too. It returns the node's HTTP address.
func locked(t *testing.T) (addr string, token uint64) {
	t.Helper()
	c := nodetest.Start(t, 1, nodetest.Options{Quiet: true})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	dial := func(ns, label string) *lockcluster.Client {
		cl, err := lockcluster.Dial(ctx, c.Addrs(), lockcluster.WithNamespace(ns), lockcluster.WithLabel(label))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close(context.Background()) })
		return cl
	}
	l, err := dial("billing", "alpha").Acquire(ctx, "invoices", lockcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	beta := dial("billing", "beta")
	wctx, wcancel := context.WithCancel(ctx)
	t.Cleanup(wcancel)
	go func() { _, _ = beta.Acquire(wctx, "invoices", lockcluster.Options{}) }()
	for _, label := range []string{"reader-1", "reader-2"} {
		if _, err := dial("reports", label).Acquire(ctx, "daily", lockcluster.Options{Mode: lockcluster.Shared}); err != nil {
			t.Fatal(err)
		}
	}
	m := c.Nodes[0].Machine()
	c.WaitFor(5*time.Second, "beta's pending request", func() bool { return len(m.Query("billing").Pending) == 1 })
	return c.Nodes[0].HTTPAddr(), l.Token()
}

// /api/state of a real node.
func TestNodeState(t *testing.T) {
	addr, token := locked(t)
	resp, err := http.Get("http://" + addr + "/api/state")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st web.State
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if st.Node != "node0" || st.RaftState != "Leader" || st.Leader != "node0" || len(st.Members) != 1 ||
		!st.Members[0].Leader || !st.Members[0].Self || st.Members[0].HTTPAddr != addr || st.Members[0].Suffrage != "Voter" {
		t.Errorf("node and members: %+v", st)
	}
	if len(st.Namespaces) != 2 || st.Namespaces[0].Name != "billing" || st.Namespaces[1].Name != "reports" {
		t.Fatalf("namespaces: %+v", st.Namespaces)
	}
	b, r := st.Namespaces[0], st.Namespaces[1]
	if len(b.Held) != 1 || b.Held[0].Label != "alpha" || b.Held[0].Token != token || len(b.Pending) != 1 || b.Pending[0].Label != "beta" {
		t.Errorf("billing: %+v", b)
	}
	if len(r.Held) != 2 || r.Held[0].Mode != "shared" || r.Held[0].Label != "reader-1" || r.Held[1].Label != "reader-2" {
		t.Errorf("reports: %+v", r)
	}
}

// chromium finds a headless-capable browser: $LOCKCLUSTER_CHROMIUM, or
// Debian's chromium. Without one the test is skipped, except in CI ($CI
// set), which installs it (.ci/run).
func chromium(t *testing.T) string {
	if p := os.Getenv("LOCKCLUSTER_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium on this machine: CI must have it (.ci/run installs Debian's chromium)")
	}
	t.Skip("no chromium (apt-get install chromium); CI runs this test")
	return ""
}

// browse runs headless chromium on url with extra flags and returns its
// standard output. The page's script gets a few seconds of virtual time.
func browse(t *testing.T, bin, url string, flags ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--hide-scrollbars", "--mute-audio", "--user-data-dir=" + t.TempDir(),
		"--virtual-time-budget=4000",
	}, flags...)
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	defer killGroup(cmd)()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v after %s\n%s", bin, err, time.Since(start).Round(time.Millisecond), tail(stderr.String(), 3000))
	}
	t.Logf("chromium %s: %s", flags, time.Since(start).Round(time.Millisecond))
	return stdout.Bytes()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// rows returns the text of each cell of the <tr class=cls> rows.
func rows(doc *html.Node, cls string) [][]string {
	var out [][]string
	var text func(*html.Node, *strings.Builder)
	text = func(n *html.Node, b *strings.Builder) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			text(c, b)
		}
	}
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "tr" && attr(n, "class") == cls {
			var row []string
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				if c.Type == html.ElementNode && c.Data == "td" {
					var b strings.Builder
					text(c, &b)
					row = append(row, strings.TrimSpace(b.String()))
				}
			}
			out = append(out, row)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	return out
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// The status page in a real browser: its script has rendered the held lock
// (holder and token) and the pending request, and a screenshot of it is a
// real picture. LOCKCLUSTER_SCREENSHOT_DIR keeps the screenshot.
func TestBrowser(t *testing.T) {
	bin := chromium(t)
	addr, token := locked(t)
	url := "http://" + addr + "/"

	dom := browse(t, bin, url, "--dump-dom")
	doc, err := html.Parse(bytes.NewReader(dom))
	if err != nil {
		t.Fatal(err)
	}
	held, pending := rows(doc, "held"), rows(doc, "pending")
	// held: lock, mode, token, holder, client id, session / request, age
	// pending: lock, mode, queue place, waiter, client id, session / request, age
	want := func(rows [][]string, cells ...string) bool {
	next:
		for _, r := range rows {
			if len(r) != 7 {
				continue
			}
			for i, c := range cells {
				if c != "" && r[i] != c {
					continue next
				}
			}
			return r[6] != ""
		}
		return false
	}
	tok := strconv.FormatUint(token, 10)
	if !want(held, "invoices", "exclusive", tok, "alpha") || !want(pending, "invoices", "exclusive", "#1", "beta") ||
		!want(held, "daily", "shared", "", "reader-1") || !want(held, "daily", "shared", "", "reader-2") {
		t.Errorf("the page did not render the locks: held %q, pending %q\n%s", held, pending, dom)
	}
	if !bytes.Contains(dom, []byte(`id="leader">node0<`)) || !bytes.Contains(dom, []byte("updated ")) {
		t.Errorf("the page did not render the node and its leader, or did not say it updated:\n%s", dom)
	}

	dir := os.Getenv("LOCKCLUSTER_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "status-page.png")
	browse(t, bin, url, "--window-size=1280,800", "--screenshot="+shot)
	data, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 800 {
		t.Errorf("screenshot is %v, want 1280×800", b)
	}
	// A rendered page has text, tables and chips: many colours. A blank or
	// error page has a handful.
	colours := map[[4]uint32]bool{}
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y += 2 {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x += 2 {
			r, g, b, a := img.At(x, y).RGBA()
			colours[[4]uint32{r, g, b, a}] = true
		}
	}
	if len(colours) < 50 {
		t.Errorf("screenshot %s has %d colours: blank?", shot, len(colours))
	}
	t.Logf("screenshot: %s (%d bytes, %d colours)", shot, len(data), len(colours))
}

package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
	"github.com/lockcluster/lockcluster/internal/testutil"
	"github.com/lockcluster/lockcluster/internal/web"
)

// locked starts a node where namespace billing has alpha holding invoices
// (token returned) and beta waiting for it, and reports shared holders in
// namespace reports too. It returns the node's HTTP address.
func locked(t *testing.T) (addr string, token uint64) {
	_, addr, token = lockedCluster(t)
	return addr, token
}

// lockedCluster is locked, with the cluster.
func lockedCluster(t *testing.T) (c *nodetest.Cluster, addr string, token uint64) {
	t.Helper()
	c = nodetest.Start(t, 1, nodetest.Options{Quiet: true})
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
	return c, c.Nodes[0].HTTPAddr(), l.Token()
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

// cellsOf returns the rows of the page's <tr class=cls> rows.
func cellsOf(t *testing.T, dom, cls string) [][]string {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(dom))
	if err != nil {
		t.Fatal(err)
	}
	return rows(doc, cls)
}

// hasRow reports whether one of rows has 7 cells, the given ones (""
// matches anything) and a last one not empty (an age).
func hasRow(rows [][]string, cells ...string) bool {
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

// The status page in a real browser: its script has rendered the held lock
// (holder and token) and the pending request, says it is live, and a
// screenshot of it is a real picture. LOCKCLUSTER_SCREENSHOT_DIR keeps the
// screenshot. Then a lock taken and released after the page loaded shows
// in "Recent changes", newest first, and in the held table, by the event
// stream: the page does not poll while it is live.
func TestBrowser(t *testing.T) {
	bin := chromium(t)
	c, addr, token := lockedCluster(t)
	b := startBrowser(t, bin)
	p := b.open("http://"+addr+"/", 1280, 800)

	// held: lock, mode, token, holder, client id, session / request, age
	// pending: lock, mode, queue place, waiter, client id, session / request, age
	tok := strconv.FormatUint(token, 10)
	var dom string
	testutil.Eventually(t, 20*time.Second, "the page to render the locks and go live", func() bool {
		dom = p.dom()
		held, pending := cellsOf(t, dom, "held"), cellsOf(t, dom, "pending")
		return hasRow(held, "invoices", "exclusive", tok, "alpha") && hasRow(pending, "invoices", "exclusive", "#1", "beta") &&
			hasRow(held, "daily", "shared", "", "reader-1") && hasRow(held, "daily", "shared", "", "reader-2") &&
			strings.Contains(dom, `id="leader">node0<`) && strings.Contains(dom, "updated ") &&
			strings.Contains(dom, `data-mode="live"`) && strings.Contains(dom, `id="mode" class="chip live"`)
	})

	dir := os.Getenv("LOCKCLUSTER_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "status-page.png")
	data := p.screenshot()
	if err := os.WriteFile(shot, data, 0o644); err != nil {
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

	// Live: a lock taken now shows in Recent changes and the held table,
	// by a read of the state that its event asked for (the page counts
	// them in data-event-reads).
	reads, messages := b.stateReads.Load(), b.streamMessages.Load()
	eventReads := func(dom string) int {
		_, after, ok := strings.Cut(dom, `data-event-reads="`)
		if !ok {
			return 0
		}
		n, _ := strconv.Atoi(after[:strings.IndexByte(after, '"')])
		return n
	}
	before := eventReads(dom)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cl, err := lockcluster.Dial(ctx, c.Addrs(), lockcluster.WithNamespace("billing"), lockcluster.WithLabel("gamma <i>"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close(context.Background()) })
	l, err := cl.Acquire(ctx, "ledger", lockcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ltok := strconv.FormatUint(l.Token(), 10)
	// change: time, namespace, change, names, holder, token
	testutil.Eventually(t, 20*time.Second, "the grant of ledger in Recent changes and the held table", func() bool {
		dom = p.dom()
		ch := cellsOf(t, dom, "change")
		return len(ch) > 0 && len(ch[0]) == 6 && ch[0][1] == "billing" && ch[0][2] == "granted" && ch[0][3] == "ledger" &&
			ch[0][4] == "gamma <i>" && ch[0][5] == ltok && ch[0][0] != "" &&
			hasRow(cellsOf(t, dom, "held"), "ledger", "exclusive", ltok, "gamma <i>") && eventReads(dom) > before
	})
	before = eventReads(dom)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the release of ledger above its grant, and ledger gone from the held table", func() bool {
		dom = p.dom()
		ch := cellsOf(t, dom, "change")
		return len(ch) >= 2 && ch[0][2] == "released" && ch[0][3] == "ledger" && ch[0][5] == ltok &&
			ch[1][2] == "granted" && ch[1][3] == "ledger" && !hasRow(cellsOf(t, dom, "held"), "ledger") && eventReads(dom) > before
	})
	if strings.Contains(dom, "<i>") {
		t.Errorf("a label became HTML:\n%s", dom)
	}
	// The page never fell back to polling every second (it counts its polls
	// in data-polls).
	if strings.Contains(dom, "data-polls=") {
		t.Errorf("the page polled while live:\n%s", dom)
	}
	t.Logf("while live: %d reads of api/state for %d events", b.stateReads.Load()-reads, b.streamMessages.Load()-messages)
}

// Without the event stream (a node without a history: /api/events is 404)
// the page says so and polls /api/state every second, as it did before
// the stream: a lock taken after it loaded still shows.
func TestBrowserPollsWithoutTheStream(t *testing.T) {
	bin := chromium(t)
	m := fsm.New()
	var index uint64
	apply := func(cmd fsm.Command) fsm.Result {
		index++
		r := m.Apply(index, fsm.Entry{Time: time.Now().UnixNano(), Cmd: cmd}).Result
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		return r
	}
	a := apply(&fsm.OpenSession{Namespace: "billing", Label: "alpha", TTL: int64(time.Minute), ClientID: "client-a"}).Session
	srv := httptest.NewServer(web.Handler(web.Options{NodeID: "node0", Machine: m}))
	t.Cleanup(srv.Close)
	p := startBrowser(t, bin).open(srv.URL+"/", 1280, 800)
	testutil.Eventually(t, 20*time.Second, "the page to load and poll", func() bool {
		dom := p.dom()
		return strings.Contains(dom, `data-mode="polling"`) && strings.Contains(dom, "data-polls=") && strings.Contains(dom, "1 sessions")
	})
	tok := strconv.FormatUint(apply(&fsm.Request{Session: a, Namespace: "billing", RequestID: 1, Names: []string{"invoices"}}).Token, 10)
	testutil.Eventually(t, 20*time.Second, "the lock taken after the page loaded", func() bool {
		return hasRow(cellsOf(t, p.dom(), "held"), "invoices", "exclusive", tok, "alpha")
	})
}

package web_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

// A headless chromium driven over the DevTools protocol on a pipe
// (--remote-debugging-pipe: requests in on fd 3, answers and events out on
// fd 4, JSON messages each ended by a NUL). The page runs in real time: it
// keeps its event stream open, which a --virtual-time-budget run would
// wait on forever, and the test reads its DOM whenever it wants, polling
// with a deadline.
type browser struct {
	t       *testing.T
	in      *os.File // to chromium
	stderr  *testutil.Buffer
	mu      sync.Mutex
	nextID  int
	waiting map[int]chan cdpMessage
	// Counted from the page's Network events: reads of api/state and
	// messages of its event stream.
	stateReads, streamMessages atomic.Int64
}

type cdpMessage struct {
	ID        int             `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// startBrowser starts chromium; the test's cleanup ends it.
func startBrowser(t *testing.T, bin string) *browser {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the DevTools pipe needs file descriptors 3 and 4 (exec.Cmd.ExtraFiles)")
	}
	toChrome, in, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	out, fromChrome, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cmd := exec.CommandContext(ctx, bin,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--hide-scrollbars", "--mute-audio", "--user-data-dir="+t.TempDir(),
		"--remote-debugging-pipe", "about:blank")
	cleanup := killGroup(cmd)
	b := &browser{t: t, in: in, stderr: &testutil.Buffer{}, waiting: map[int]chan cdpMessage{}}
	cmd.Stderr = b.stderr
	cmd.ExtraFiles = []*os.File{toChrome, fromChrome} // fds 3 and 4
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	_ = toChrome.Close()
	_ = fromChrome.Close()
	done := make(chan struct{})
	go b.read(out, done)
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		cleanup()
		_ = in.Close()
		<-done
		_ = out.Close()
	})
	return b
}

func (b *browser) read(out *os.File, done chan struct{}) {
	defer close(done)
	r := bufio.NewReaderSize(out, 1<<20)
	for {
		line, err := r.ReadBytes(0)
		if err != nil {
			b.mu.Lock()
			for id, ch := range b.waiting {
				close(ch)
				delete(b.waiting, id)
			}
			b.mu.Unlock()
			return
		}
		var m cdpMessage
		if json.Unmarshal(line[:len(line)-1], &m) != nil {
			continue
		}
		if m.ID != 0 {
			b.mu.Lock()
			ch := b.waiting[m.ID]
			delete(b.waiting, m.ID)
			b.mu.Unlock()
			if ch != nil {
				ch <- m
			}
			continue
		}
		switch m.Method {
		case "Network.requestWillBeSent":
			var p struct {
				Request struct {
					URL string `json:"url"`
				} `json:"request"`
			}
			if json.Unmarshal(m.Params, &p) == nil {
				if u, err := url.Parse(p.Request.URL); err == nil && u.Path == "/api/state" {
					b.stateReads.Add(1)
				}
			}
		case "Network.eventSourceMessageReceived":
			b.streamMessages.Add(1)
		}
	}
}

// call sends a command (to the page's session when session is not "") and
// decodes its result into result.
func (b *browser) call(session, method string, params, result any) {
	b.t.Helper()
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	ch := make(chan cdpMessage, 1)
	b.waiting[id] = ch
	b.mu.Unlock()
	p, err := json.Marshal(params)
	if err != nil {
		b.t.Fatal(err)
	}
	msg, err := json.Marshal(cdpMessage{ID: id, Method: method, SessionID: session, Params: p})
	if err != nil {
		b.t.Fatal(err)
	}
	if _, err := b.in.Write(append(msg, 0)); err != nil {
		b.t.Fatalf("%s: %v\n%s", method, err, tail(b.stderr.String(), 3000))
	}
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	select {
	case m, ok := <-ch:
		if !ok {
			b.t.Fatalf("%s: chromium went away\n%s", method, tail(b.stderr.String(), 3000))
		}
		if m.Error != nil {
			b.t.Fatalf("%s: %d %s", method, m.Error.Code, m.Error.Message)
		}
		if result != nil {
			if err := json.Unmarshal(m.Result, result); err != nil {
				b.t.Fatalf("%s: %v: %s", method, err, m.Result)
			}
		}
	case <-deadline.C:
		b.t.Fatalf("%s: no answer in 20s\n%s", method, tail(b.stderr.String(), 3000))
	}
}

// page is a tab, attached.
type page struct {
	b       *browser
	session string
}

// open opens url in a new tab of width×height CSS pixels, with its network
// events on.
func (b *browser) open(url string, width, height int) *page {
	b.t.Helper()
	var target struct {
		TargetID string `json:"targetId"`
	}
	b.call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var att struct {
		SessionID string `json:"sessionId"`
	}
	b.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att)
	p := &page{b: b, session: att.SessionID}
	b.call(p.session, "Network.enable", map[string]any{}, nil)
	b.call(p.session, "Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}, nil)
	b.call(p.session, "Page.navigate", map[string]any{"url": url}, nil)
	return p
}

// dom returns the page's document as it stands now ("" while there is
// none: the page is loading).
func (p *page) dom() string {
	p.b.t.Helper()
	var r struct {
		Result struct {
			Value string `json:"value"`
		} `json:"result"`
		ExceptionDetails any `json:"exceptionDetails"`
	}
	p.b.call(p.session, "Runtime.evaluate", map[string]any{"expression": "document.documentElement ? document.documentElement.outerHTML : ''", "returnByValue": true}, &r)
	if r.ExceptionDetails != nil {
		p.b.t.Fatalf("reading the DOM: %v", r.ExceptionDetails)
	}
	return r.Result.Value
}

// screenshot returns a PNG of the page's viewport.
func (p *page) screenshot() []byte {
	p.b.t.Helper()
	var r struct {
		Data string `json:"data"`
	}
	p.b.call(p.session, "Page.captureScreenshot", map[string]any{"format": "png"}, &r)
	data, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil {
		p.b.t.Fatal(err)
	}
	return data
}

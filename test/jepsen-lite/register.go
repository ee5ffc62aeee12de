package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Writer is what a lock holder writes its token to.
type Writer interface {
	// Write offers token for name on behalf of hold; false: refused.
	Write(ctx context.Context, process int, hold, name string, token uint64) (bool, error)
}

// Register is the resource the locks protect, kept by the harness. Like a
// careful resource server it refuses a token lower than the highest it has
// seen for the name (Chubby's sequencers), and it records every write it
// sees, accepted or refused, in the history.
type Register struct {
	mu   sync.Mutex
	max  map[string]uint64
	sink Sink
}

// NewRegister returns an empty register recording to sink.
func NewRegister(sink Sink) *Register {
	return &Register{max: map[string]uint64{}, sink: sink}
}

// Write implements Writer.
func (r *Register) Write(_ context.Context, process int, hold, name string, token uint64) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	op := Op{Process: process, Type: "event", F: "write", Hold: hold, Names: []string{name}, Token: token}
	ok := token >= r.max[name]
	if ok {
		r.max[name] = token
		op.Result = "accepted"
	} else {
		op.Result = "refused"
		op.Value = fmt.Sprintf("highest seen %d", r.max[name])
	}
	op.Time = now() // under the lock: the register's order is the history's
	r.sink.Add(op)
	return ok, nil
}

// Serve serves the register over HTTP on a loopback port for client
// processes, until ctx ends. It returns the base URL.
func (r *Register) Serve(ctx context.Context) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		v := q.URL.Query()
		p, _ := strconv.Atoi(v.Get("process"))
		tok, err := strconv.ParseUint(v.Get("token"), 10, 64)
		if err != nil {
			http.Error(w, "bad token", http.StatusBadRequest)
			return
		}
		if ok, _ := r.Write(q.Context(), p, v.Get("hold"), v.Get("name"), tok); !ok {
			http.Error(w, "refused", http.StatusConflict)
			return
		}
		fmt.Fprintln(w, "accepted")
	})}
	go srv.Serve(l)
	go func() { <-ctx.Done(); srv.Close() }()
	return "http://" + l.Addr().String(), nil
}

// httpWriter writes to a Register served over HTTP.
type httpWriter struct {
	base string
	hc   *http.Client
}

func (h *httpWriter) Write(ctx context.Context, process int, hold, name string, token uint64) (bool, error) {
	v := url.Values{"process": {strconv.Itoa(process)}, "hold": {hold}, "name": {name}, "token": {strconv.FormatUint(token, 10)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.base+"/write?"+v.Encode(), nil)
	if err != nil {
		return false, err
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}

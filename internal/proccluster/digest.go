package proccluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Digest is a node's answer to GET /debug/digest.
type Digest struct {
	ID string `json:"id"`
	// The state digest, cached at Index; Stable when the node was quiet.
	Index  uint64 `json:"index"`
	Digest string `json:"digest"`
	Stable bool   `json:"stable"`
	// LastIndex is the node's last applied index now.
	LastIndex uint64 `json:"last_index"`
	// The running hash of every applied log entry (raftnode): the last
	// index folded into it (nil: a lockcluster without the running hash)
	// and the hash through it ("" when the node does not know its chain,
	// e.g. restored from a snapshot written before it had one).
	AppliedIndex *uint64 `json:"applied_index"`
	AppliedHash  string  `json:"applied_hash"`
	// Diverged is why the node fenced itself (a checkpoint did not match
	// its own hash), "" if it did not.
	Diverged string `json:"diverged"`
	// With ?at=N: the hash at exactly index N, or "" and why not.
	AtIndex uint64 `json:"at_index"`
	AtHash  string `json:"at_hash"`
	AtError string `json:"at_error"`
}

// digestClient asks over HTTP, or over HTTPS when the node serves TLS; the
// node's certificate is not verified: these are the caller's own processes
// on loopback, asked for a debug value.
var digestClient = &http.Client{Timeout: 3 * time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

// ReadDigest asks the node whose HTTP address is httpAddr for its
// /debug/digest: its hash at exactly index at when at > 0. token, if not
// "", is sent as the bearer credential (with auth on, the endpoint needs
// an admin's). A node that serves TLS answers the plain request 400, and
// is asked again over HTTPS.
func ReadDigest(ctx context.Context, httpAddr string, at uint64, token string) (Digest, error) {
	query := ""
	if at > 0 {
		query = fmt.Sprintf("?at=%d", at)
	}
	var d Digest
	var err error
	for _, scheme := range []string{"http", "https"} {
		var status int
		if status, err = getJSON(ctx, scheme+"://"+httpAddr+"/debug/digest"+query, token, &d); status != http.StatusBadRequest {
			break
		}
	}
	if err != nil {
		return d, fmt.Errorf("GET %s/debug/digest%s: %w", httpAddr, query, err)
	}
	return d, nil
}

func getJSON(ctx context.Context, url, token string, v any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := digestClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, fmt.Errorf("%s (a lockcluster without the debug endpoint?)", resp.Status)
	}
	return resp.StatusCode, json.NewDecoder(resp.Body).Decode(v)
}

package node_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/lockcluster/lockcluster/internal/auth"
	"github.com/lockcluster/lockcluster/internal/node"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
)

// With auth on, /debug/digest needs the admin credential, as /metrics
// does; with it, the answer keeps every field the chaos harness reads.
func TestDigestNeedsAdmin(t *testing.T) {
	const admin, user = "admin-token-0123456789abcdef", "user-token-0123456789abcdef"
	c := nodetest.Start(t, 1, nodetest.Options{Quiet: true, Node: func(cfg *node.Config) {
		cfg.Auth = auth.Config{AdminTokens: []string{admin}, Namespaces: map[string]auth.Namespace{"ns": {Tokens: []string{user}}}}
	}})
	url := "http://" + c.Nodes[0].HTTPAddr() + "/debug/digest?at=1"
	fetch := func(token string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	for _, token := range []string{"", user, "wrong-token-0123456789abcdef"} {
		if code, body := fetch(token); code != http.StatusUnauthorized {
			t.Errorf("token %q: %d %s, want 401", token, code, body)
		}
	}
	code, body := fetch(admin)
	var d map[string]any
	if code != http.StatusOK || json.Unmarshal(body, &d) != nil {
		t.Fatalf("admin: %d %s", code, body)
	}
	for _, k := range []string{"id", "index", "digest", "stable", "applied_index", "applied_hash", "diverged", "at_index", "last_index", "digest_at", "digest_every"} {
		if _, ok := d[k]; !ok {
			t.Errorf("the answer has no %q: %s", k, body)
		}
	}
	if _, ok := d["at_hash"]; !ok {
		if _, ok := d["at_error"]; !ok {
			t.Errorf("?at=1 answered neither at_hash nor at_error: %s", body)
		}
	}
}

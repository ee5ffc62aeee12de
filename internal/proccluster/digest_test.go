package proccluster

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// ReadDigest reads plain HTTP and, from a node that serves TLS, HTTPS; it
// sends the token and asks ?at= when given one.
func TestReadDigest(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		idx := uint64(12)
		_ = json.NewEncoder(w).Encode(Digest{ID: "node0", LastIndex: 12, AppliedIndex: &idx, AtHash: r.URL.Query().Get("at")})
	})
	for _, srv := range []*httptest.Server{httptest.NewServer(h), httptest.NewTLSServer(h)} {
		defer srv.Close()
		_, addr, _ := strings.Cut(srv.URL, "://")
		d, err := ReadDigest(context.Background(), addr, 7, "tok")
		if err != nil || d.ID != "node0" || d.LastIndex != 12 || *d.AppliedIndex != 12 || d.AtHash != "7" {
			t.Errorf("%s: %+v %v", srv.URL, d, err)
		}
		if _, err := ReadDigest(context.Background(), addr, 0, "other"); err == nil || !strings.Contains(err.Error(), "401") {
			t.Errorf("%s with a wrong token: %v", srv.URL, err)
		}
	}
}

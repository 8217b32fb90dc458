package service

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/memstore"
)

// TestAPIPrefixRootIsNotRedirected: "/v1/ratelimit" (the API prefix without
// its slash) is not an API path. On the shared listener it is proxied like
// any other path, and on the API listener it is a 404, never the 301 a
// ServeMux answers for a subtree's bare root (a POST would be lost, or
// sent to the API).
func TestAPIPrefixRootIsNotRedirected(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("upstream " + r.Method + " " + r.URL.Path))
	}))
	defer up.Close()
	cfg, err := ParseConfig("t.yaml", "yaml", []byte("upstream: "+up.URL+"\nrules: [{name: r, strategy: gcra, limit: 3, window: 1s}]"))
	require.NoError(t, err)
	mem := memstore.New(nil)
	defer mem.Close()
	svc, err := New(cfg, Options{Store: mem, Logger: quietLogger()})
	require.NoError(t, err)

	for _, method := range []string{"GET", "POST"} {
		w := httptest.NewRecorder()
		svc.Handler().ServeHTTP(w, httptest.NewRequest(method, "/v1/ratelimit", nil))
		require.Equal(t, 200, w.Code, "%s on the shared listener", method)
		require.Equal(t, "upstream "+method+" /v1/ratelimit", w.Body.String())

		w = httptest.NewRecorder()
		svc.APIHandler().ServeHTTP(w, httptest.NewRequest(method, "/v1/ratelimit", nil))
		require.Equal(t, 404, w.Code, "%s on the API listener", method)
	}
	// The API itself is still the API's on the shared listener (401
	// without a token).
	w := httptest.NewRecorder()
	svc.Handler().ServeHTTP(w, httptest.NewRequest("POST", "/v1/ratelimit/check", nil))
	require.Equal(t, 401, w.Code)
}

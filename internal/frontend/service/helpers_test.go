package service

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/wasm"
)

// wasmPool hosts the embedded WebAssembly core for a test.
func wasmPool(t testing.TB) *wasm.Pool {
	t.Helper()
	p, err := wasm.New(context.Background(), wasm.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// testHandler serves the decision API as its own trusted listener would
// (every caller an admin when the configuration has no tokens) and every
// other path through the proxy, so a test reaches both through one server.
func testHandler(s *Service) http.Handler {
	mux := http.NewServeMux()
	api := s.APIHandler()
	mux.Handle(APIPrefix, api)
	mux.Handle("/metrics", api)
	mux.Handle("/healthz", api)
	mux.Handle("/readyz", api)
	mux.Handle("/", s.ProxyHandler())
	return mux
}

func newServer(t testing.TB, s *Service) *httptest.Server {
	srv := httptest.NewServer(testHandler(s))
	t.Cleanup(srv.Close)
	return srv
}

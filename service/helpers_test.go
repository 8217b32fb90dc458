package service

import (
	"context"
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

func newServer(t testing.TB, s *Service) *httptest.Server {
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv
}

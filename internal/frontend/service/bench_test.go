package service

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/memstore"
)

// BenchmarkHandler measures the service's own cost per request, without
// the network: the decision API and the proxy filter (to the demo
// upstream), with the WASM decider over the memory store.
func BenchmarkHandler(b *testing.B) {
	cfg, err := ParseConfig("b.yaml", "yaml", []byte(`
upstream: demo
rules:
  - {name: api, strategy: token, limit: 1000000000, window: 1s}
  - {name: proxy, endpoint: /p, key_by: "header:X-User", strategy: token, limit: 1000000000, window: 1s}
`))
	require.NoError(b, err)
	mem := memstore.New(&memstore.Config{Decider: wasmPool(b)})
	defer mem.Close()
	svc, err := New(cfg, Options{Store: mem, Logger: quietLogger()})
	require.NoError(b, err)
	h := testHandler(svc)
	bodies := make([][]byte, 1000)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"rule":"api","key":"user-%d"}`, i)
	}
	b.Run("op=check", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			r := httptest.NewRequest("POST", APIPrefix+"check", bytes.NewReader(bodies[i%len(bodies)]))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != 200 {
				b.Fatal(w.Code, w.Body.String())
			}
			i++
		}
	})
	b.Run("op=proxy", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			r := httptest.NewRequest("GET", "/p", nil)
			r.Header.Set("X-User", "u")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != 200 {
				b.Fatal(w.Code)
			}
			i++
		}
	})
	b.Run("op=floor", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r := httptest.NewRequest("POST", "/x", bytes.NewReader(bodies[0]))
			w := httptest.NewRecorder()
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("{}")) }).ServeHTTP(w, r)
		}
	})
}

package rls

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/frontend/service"
	"github.com/rlcore/rl/memstore"
	"github.com/rlcore/rl/wasm"
)

const loadYAML = `
domain: load
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 4000000000, algorithm: token}
`

// loadEnv is one Service (WASM decider, memory store) serving the HTTP
// decision API on a loopback listener and the rate limit service on
// another.
func loadEnv(t testing.TB) (api string, rls rlsv3.RateLimitServiceClient) {
	t.Helper()
	pool, err := wasm.New(context.Background(), wasm.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { pool.Close(context.Background()) })
	m := memstore.New(&memstore.Config{Decider: pool})
	t.Cleanup(func() { m.Close() })
	cfg, err := service.ParseConfig("load.yaml", "yaml", []byte(`rules: [{name: api, strategy: token, limit: 1000000000, window: 1s}]`))
	require.NoError(t, err)
	svc, err := service.New(cfg, service.Options{Store: m, Logger: quietLogger()})
	require.NoError(t, err)
	dom, err := ParseDomain("load.yaml", []byte(loadYAML))
	require.NoError(t, err)
	srv, err := New(svc, &Config{Domains: map[string]*Domain{"load": dom}}, Options{Trusted: true})
	require.NoError(t, err)
	hs := httptest.NewServer(svc.APIHandler())
	t.Cleanup(hs.Close)
	return hs.URL, serve(t, srv)
}

// TestLoad measures the rate limit service beside the HTTP decision API in
// the same run, over the same Service, decider and store: 64 concurrent
// streams on ONE gRPC connection against 64 keep-alive HTTP/1.1 clients,
// 1000 keys, every decision admitted. It prints decisions/s and the ratio
// (go test -run TestLoad -v ./internal/frontend/rls) and asserts only that every
// call succeeded, never a timing. RL_LOAD_DURATION sets each phase's length
// (default 200ms: the suite checks that every call succeeds; figures to
// publish take RL_LOAD_DURATION=3s).
func TestLoad(t *testing.T) {
	dur := 200 * time.Millisecond
	if v := os.Getenv("RL_LOAD_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err)
		dur = d
	}
	const conc, keys = 64, 1000
	api, client := loadEnv(t)

	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = conc, conc
	hc := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	bodies := make([][]byte, keys)
	descs := make([][]*commonv3.RateLimitDescriptor, keys)
	for i := range keys {
		bodies[i] = fmt.Appendf(nil, `{"rule":"api","key":"user-%d"}`, i)
		descs[i] = []*commonv3.RateLimitDescriptor{d("user", fmt.Sprintf("user-%d", i))}
	}

	run := func(name string, call func(i int) error) float64 {
		var n atomic.Int64
		var failed atomic.Value
		deadline := time.Now().Add(dur)
		start := time.Now()
		var wg sync.WaitGroup
		for g := range conc {
			wg.Go(func() {
				for i := g; time.Now().Before(deadline); i += conc {
					if err := call(i % keys); err != nil {
						failed.Store(err)
						return
					}
					n.Add(1)
				}
			})
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rate := float64(n.Load()) / time.Since(start).Seconds()
		t.Logf("%-28s %9.0f decisions/s", name, rate)
		return rate
	}
	httpCall := func(i int) error {
		resp, err := hc.Post(api+service.APIPrefix+"check", "application/json", bytes.NewReader(bodies[i]))
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		return nil
	}
	grpcCall := func(i int) error {
		r, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "load", Descriptors: descs[i]})
		if err != nil {
			return err
		}
		if r.OverallCode != rlsv3.RateLimitResponse_OK {
			return fmt.Errorf("code %v", r.OverallCode)
		}
		return nil
	}
	// Warm both paths (connections, keys), then measure each twice,
	// interleaved, and keep the better run of each.
	run("warm-up http", httpCall)
	run("warm-up grpc", grpcCall)
	h1 := run("http decision API (64 conns)", httpCall)
	g1 := run("grpc rls (1 conn, 64 streams)", grpcCall)
	h2 := run("http decision API (64 conns)", httpCall)
	g2 := run("grpc rls (1 conn, 64 streams)", grpcCall)
	h, g := max(h1, h2), max(g1, g2)
	t.Logf("grpc / http = %.2f (target ≥ 0.80)", g/h)
}

// BenchmarkDecisions compares the rate limit service with the HTTP
// decision API over the same Service (WASM decider, memory store), one
// descriptor or key of 1000 per call, 32 parallel callers per CPU: api=grpc
// on ONE connection (many streams), api=http on keep-alive connections.
func BenchmarkDecisions(b *testing.B) {
	api, client := loadEnv(b)
	descs := make([][]*commonv3.RateLimitDescriptor, 1000)
	bodies := make([][]byte, 1000)
	for i := range descs {
		descs[i] = []*commonv3.RateLimitDescriptor{d("user", fmt.Sprintf("user-%d", i))}
		bodies[i] = fmt.Appendf(nil, `{"rule":"api","key":"user-%d"}`, i)
	}
	b.Run("api=grpc", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(32)
		var next atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := int(next.Add(1))
			for pb.Next() {
				i++
				if _, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "load", Descriptors: descs[i%len(descs)]}); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("api=http", func(b *testing.B) {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 256, 256
		defer tr.CloseIdleConnections()
		hc := &http.Client{Transport: tr}
		b.ReportAllocs()
		b.SetParallelism(32)
		var next atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := int(next.Add(1))
			for pb.Next() {
				i++
				resp, err := hc.Post(api+service.APIPrefix+"check", "application/json", bytes.NewReader(bodies[i%len(bodies)]))
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	})
}

package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rlcore/rl/internal/frontend/rls"
	"github.com/rlcore/rl/internal/testkit/await"
)

// The Envoy rate limit service as Run serves it: started beside the HTTP
// listeners, reloaded with them, its metrics on their /metrics.
func TestRunExtension(t *testing.T) {
	dir := t.TempDir()
	mainPath := filepath.Join(dir, "main.yaml")
	rlsPath := filepath.Join(dir, "rls.yaml")
	require.NoError(t, os.WriteFile(mainPath, []byte(`rules: [{name: api, strategy: fixed, limit: 1, window: 1s}]`), 0o644))
	write := func(n string) {
		require.NoError(t, os.WriteFile(rlsPath, []byte(`{domain: d, descriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: `+n+`}}]}`), 0o644))
	}
	write("5")
	var mu sync.Mutex
	addrs := map[string]string{}
	ctx, cancel := context.WithCancel(context.Background())
	reload := make(chan os.Signal, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, RunConfig{ConfigPath: mainPath, Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0",
			Decider: "native", Logger: slog.New(slog.DiscardHandler),
			OnListen: func(role, addr string) {
				mu.Lock()
				addrs[role] = addr
				mu.Unlock()
			},
			Extensions: []Extension{rls.NewExtension(rls.ExtensionConfig{Listen: "127.0.0.1:0", ConfigPath: rlsPath})},
		}, reload)
	}()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	await.Until(t, "the gRPC and API listeners", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return addrs["grpc"] != "" && addrs["api"] != ""
	})
	conn, err := grpc.NewClient(addrs["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	limitOf := func() uint32 {
		r, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d",
			Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
		require.NoError(t, err)
		return r.Statuses[0].CurrentLimit.RequestsPerUnit
	}
	require.Equal(t, uint32(5), limitOf())

	write("7")
	reload <- os.Interrupt
	await.Until(t, "the reloaded limit", func() bool { return limitOf() == 7 })
	write("oops")
	reload <- os.Interrupt

	await.Until(t, "the failed reload counted", func() bool {
		resp, err := http.Get("http://" + addrs["api"] + "/metrics")
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(b), `rl_rls_config_reloads_total{result="failure"} 1`)
	})
	require.Equal(t, uint32(7), limitOf(), "an invalid file keeps the configuration in force")
	resp, err := http.Get("http://" + addrs["api"] + "/metrics")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.True(t, strings.Contains(string(b), `rl_rls_descriptor_decisions_total{descriptor="k",domain="d",outcome="allowed"}`), "%s", b)
	require.True(t, strings.Contains(string(b), `rl_rls_requests_total{code="ok",domain="d"}`))
}

// TestCheckAPIListen: an API that untrusted clients could reach needs
// api_tokens.
func TestCheckAPIListen(t *testing.T) {
	for _, c := range []struct {
		addr   string
		tokens bool
		ok     bool
	}{
		{"127.0.0.1:8081", false, true},
		{"[::1]:8081", false, true},
		{"localhost:8081", false, true},
		{":8081", false, false},
		{"0.0.0.0:8081", false, false},
		{"10.0.0.5:8081", false, false},
		{"main", false, false},
		{"main", true, true},
		{":8081", true, true},
		{"nonsense", false, false},
	} {
		err := checkAPIListen(c.addr, c.tokens)
		require.Equal(t, c.ok, err == nil, "%s tokens=%v: %v", c.addr, c.tokens, err)
	}
}

// fakeExtension binds a listener on Start (or fails), and closes it on
// Shutdown.
type fakeExtension struct {
	fail     bool
	ln       net.Listener
	shutdown bool
}

func (f *fakeExtension) Start(rls.Host) (string, string, error) {
	if f.fail {
		return "", "", errors.New("fake: cannot start")
	}
	var err error
	f.ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", "", err
	}
	return "fake", f.ln.Addr().String(), nil
}
func (f *fakeExtension) Serve() error { return nil }
func (f *fakeExtension) Reload()      {}
func (f *fakeExtension) Shutdown(context.Context) {
	f.shutdown = true
	f.ln.Close()
}

// TestRunReleasesStartedExtensions: when an extension fails to start, the
// ones already started are shut down (their listeners released) before Run
// returns the error.
func TestRunReleasesStartedExtensions(t *testing.T) {
	dir := t.TempDir()
	mainPath := filepath.Join(dir, "main.yaml")
	require.NoError(t, os.WriteFile(mainPath, []byte("rules: [{name: api, strategy: fixed, limit: 10, window: 1s}]\n"), 0o600))
	first, second := &fakeExtension{}, &fakeExtension{fail: true}
	err := Run(context.Background(), RunConfig{ConfigPath: mainPath, Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0",
		Decider: "native", Logger: slog.New(slog.DiscardHandler), Extensions: []Extension{first, second}}, nil)
	require.ErrorContains(t, err, "fake: cannot start")
	require.True(t, first.shutdown, "the started extension was shut down")
	_, err = net.Dial("tcp", first.ln.Addr().String())
	require.Error(t, err, "its listener was released")
}

// TestPprofListen: -pprof-listen serves the profiler on a loopback address
// of its own, and Run refuses any other address before serving anything.
func TestPprofListen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "main.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`rules: [{name: api, strategy: fixed, limit: 1, window: 1s}]`), 0o644))
	err := Run(context.Background(), RunConfig{ConfigPath: path, Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0",
		PprofListen: "0.0.0.0:0", Decider: "native", Logger: slog.New(slog.DiscardHandler)}, nil)
	require.ErrorContains(t, err, "-pprof-listen")

	var mu sync.Mutex
	addrs := map[string]string{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, RunConfig{ConfigPath: path, Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0",
			PprofListen: "127.0.0.1:0", Decider: "native", Logger: slog.New(slog.DiscardHandler),
			OnListen: func(role, addr string) {
				mu.Lock()
				addrs[role] = addr
				mu.Unlock()
			}}, nil)
	}()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	await.Until(t, "the pprof listener", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return addrs["pprof"] != ""
	})
	resp, err := http.Get("http://" + addrs["pprof"] + "/debug/pprof/cmdline")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = http.Get("http://" + addrs["api"] + "/debug/pprof/cmdline")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "never on the API's listener")
}

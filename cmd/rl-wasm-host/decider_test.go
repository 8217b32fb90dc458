package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/wasm"
)

// logRecorder is a slog.Handler that keeps every record's message and
// attributes, and hands each to waiters: a test waits for a log line (the
// event), never for a time.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
	seen  chan struct{} // closed and replaced on every record
}

func newLogRecorder() *logRecorder { return &logRecorder{seen: make(chan struct{})} }

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", rec.Level, rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	r.mu.Lock()
	r.lines = append(r.lines, b.String())
	close(r.seen)
	r.seen = make(chan struct{})
	r.mu.Unlock()
	return nil
}

// wait returns the first line containing s, waiting for it as long as the
// test may run.
func (r *logRecorder) wait(t *testing.T, s string) string {
	t.Helper()
	for {
		r.mu.Lock()
		for _, l := range r.lines {
			if strings.Contains(l, s) {
				r.mu.Unlock()
				return l
			}
		}
		seen := r.seen
		r.mu.Unlock()
		<-seen
	}
}

// runHost runs Run with rc (the listeners on loopback ports of their own)
// until the test ends, and returns the proxy's and the API's base URLs once
// both listen, or Run's error if it returns first.
func runHost(t *testing.T, rc RunConfig) (proxy, api string, err error) {
	t.Helper()
	dir := t.TempDir()
	rc.ConfigPath = filepath.Join(dir, "main.yaml")
	require.NoError(t, os.WriteFile(rc.ConfigPath, []byte(`upstream: demo
rules:
  - {name: login, strategy: fixed, limit: 5, window: 1h}
  - {name: all, endpoint: /, key_by: ip, strategy: token, limit: 1000, window: 1s}
`), 0o600))
	rc.Listen, rc.APIListen = "127.0.0.1:0", "127.0.0.1:0"
	addrs := make(chan [2]string, 2)
	rc.OnListen = func(role, addr string) { addrs <- [2]string{role, addr} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, rc, nil) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	for proxy == "" || api == "" {
		select {
		case a := <-addrs:
			if a[0] == "proxy" {
				proxy = "http://" + a[1]
			} else {
				api = "http://" + a[1]
			}
		case err := <-done:
			done <- nil // for the cleanup
			return "", "", err
		}
	}
	return proxy, api, nil
}

// httpDo returns the status and body of a GET (or, with a body, a POST).
func httpDo(t *testing.T, url, body string) (int, string) {
	t.Helper()
	var resp *http.Response
	var err error
	if body == "" {
		resp, err = http.Get(url)
	} else {
		resp, err = http.Post(url, "application/json", strings.NewReader(body))
	}
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// checkLogin takes one unit of the login rule's key k and returns the status
// and remaining units.
func checkLogin(t *testing.T, api string) (int, string) {
	t.Helper()
	code, body := httpDo(t, api+"/v1/ratelimit/check", `{"rule":"login","key":"k"}`)
	i := strings.Index(body, `"remaining":`)
	require.GreaterOrEqual(t, i, 0, body)
	return code, strings.SplitN(body[i+len(`"remaining":`):], ",", 2)[0]
}

// blockingPool is a RunConfig.newPool that blocks in the "compilation"
// until released, then builds the pool with wasm.New (or fails with err).
type blockingPool struct {
	entered, gate chan struct{}
	err           error
}

func newBlockingPool() *blockingPool {
	return &blockingPool{entered: make(chan struct{}), gate: make(chan struct{})}
}

func (b *blockingPool) newPool(ctx context.Context, cfg wasm.Config) (*wasm.Pool, error) {
	close(b.entered)
	<-b.gate
	if b.err != nil {
		return nil, b.err
	}
	return wasm.New(ctx, cfg)
}

// TestServesBeforeCompiled: with -decider wasm the service answers on the
// proxy and the decision API while the module is still compiling (held
// there by the test), the native core deciding, as /metrics and /readyz
// say; once compiled, the WebAssembly core takes over (one log line with
// the compile time) and carries on the same key's count: 5 per hour, 3
// taken before the switch, 2 after, then denied.
func TestServesBeforeCompiled(t *testing.T) {
	bp := newBlockingPool()
	logs := newLogRecorder()
	proxy, api, err := runHost(t, RunConfig{Decider: "wasm", Logger: slog.New(logs), newPool: bp.newPool})
	require.NoError(t, err)
	<-bp.entered // compiling, and held there until the gate opens

	code, _ := httpDo(t, proxy+"/", "")
	require.Equal(t, http.StatusOK, code, "the proxy answers while the module compiles")
	for _, want := range []string{"4", "3", "2"} {
		code, rem := checkLogin(t, api)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, want, rem)
	}
	code, body := httpDo(t, api+"/readyz", "")
	require.Equal(t, http.StatusOK, code, "ready while the native core decides: it decides alike")
	require.Contains(t, body, "decider: native (the WebAssembly module is compiling")
	_, metrics := httpDo(t, api+"/metrics", "")
	require.Contains(t, metrics, `rl_decider{decider="native"} 1`)
	require.Contains(t, metrics, `rl_decider{decider="wasm"} 0`)
	require.Contains(t, metrics, "rl_wasm_compile_seconds 0\n")
	require.Contains(t, metrics, `rl_wasm_instances{state="idle"} 0`)

	close(bp.gate)
	line := logs.wait(t, "decider: the WebAssembly core hosted by wazero takes over from the native core")
	require.Contains(t, line, "compile=")

	code, body = httpDo(t, api+"/readyz", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "decider: wasm\n")
	_, metrics = httpDo(t, api+"/metrics", "")
	require.Contains(t, metrics, `rl_decider{decider="native"} 0`)
	require.Contains(t, metrics, `rl_decider{decider="wasm"} 1`)
	require.NotContains(t, metrics, "rl_wasm_compile_seconds 0\n")
	require.Contains(t, metrics, "rl_wasm_start_failed 0")
	for _, want := range []string{"1", "0"} {
		code, rem := checkLogin(t, api)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, want, rem)
	}
	code, _ = checkLogin(t, api)
	require.Equal(t, http.StatusTooManyRequests, code, "the WebAssembly core continues the native core's count")
	_, metrics = httpDo(t, api+"/metrics", "")
	require.Contains(t, metrics, `rl_wasm_instances_started_total 1`, "the module decided")
}

// TestWasmStartFails: when the module cannot start, the service keeps
// deciding with the native core (the same decisions) and says so: an
// error line with the cause, rl_wasm_start_failed 1, rl_decider native,
// /readyz still 200 with the reason. With -wasm-wait the start fails.
func TestWasmStartFails(t *testing.T) {
	cause := errors.New("mmap: operation not permitted")
	t.Run("handoff", func(t *testing.T) {
		bp := newBlockingPool()
		bp.err = cause
		logs := newLogRecorder()
		_, api, err := runHost(t, RunConfig{Logger: slog.New(logs), newPool: bp.newPool})
		require.NoError(t, err)
		close(bp.gate)
		line := logs.wait(t, "the WebAssembly module did not start")
		require.Contains(t, line, "ERROR")
		require.Contains(t, line, cause.Error())
		_, metrics := httpDo(t, api+"/metrics", "")
		require.Contains(t, metrics, "rl_wasm_start_failed 1")
		require.Contains(t, metrics, `rl_decider{decider="native"} 1`)
		code, body := httpDo(t, api+"/readyz", "")
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, "decider: native (the WebAssembly module could not start")
		for _, want := range []string{"4", "3"} {
			code, rem := checkLogin(t, api)
			require.Equal(t, http.StatusOK, code)
			require.Equal(t, want, rem)
		}
	})
	t.Run("wait", func(t *testing.T) {
		bp := newBlockingPool()
		bp.err = cause
		close(bp.gate)
		_, _, err := runHost(t, RunConfig{WasmWait: true, Logger: slog.New(slog.DiscardHandler), newPool: bp.newPool})
		require.ErrorIs(t, err, cause)
		require.ErrorContains(t, err, "WebAssembly decider")
	})
}

// TestWasmWait: -wasm-wait compiles before serving: no listener is bound
// while the module compiles, and the WebAssembly core decides from the
// first request.
func TestWasmWait(t *testing.T) {
	bp := newBlockingPool()
	logs := newLogRecorder()
	var early []string // lines logged while the module compiled
	go func() {
		<-bp.entered
		logs.mu.Lock()
		early = append(early, logs.lines...)
		logs.mu.Unlock()
		close(bp.gate)
	}()
	_, api, err := runHost(t, RunConfig{WasmWait: true, Logger: slog.New(logs), newPool: bp.newPool})
	require.NoError(t, err)
	for _, l := range early {
		require.NotContains(t, l, "listening", "a listener before the module compiled")
		require.NotContains(t, l, "store:", "the store before the module compiled")
	}
	_, metrics := httpDo(t, api+"/metrics", "")
	require.Contains(t, metrics, `rl_decider{decider="wasm"} 1`)
	require.Contains(t, metrics, "rl_wasm_start_failed 0")
	code, rem := checkLogin(t, api)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "4", rem)
	_, metrics = httpDo(t, api+"/metrics", "")
	require.Contains(t, metrics, `rl_wasm_instances_started_total 1`)
	require.Contains(t, logs.wait(t, "decider: WebAssembly core hosted by wazero"), "compile=")
}

// TestOpenPoolRetriesWithoutCache: a pool that fails with a cache directory
// is built again without it (wazero fails a compilation whose cache entry
// it cannot read or write), with a warning; without a directory there is
// no second try.
func TestOpenPoolRetriesWithoutCache(t *testing.T) {
	var dirs []string
	errCache, errOther := errors.New("cache entry corrupt"), errors.New("second try")
	logs := newLogRecorder()
	h := &host{log: slog.New(logs), rc: RunConfig{newPool: func(_ context.Context, cfg wasm.Config) (*wasm.Pool, error) {
		dirs = append(dirs, cfg.CacheDir)
		if cfg.CacheDir != "" {
			return nil, errCache
		}
		return nil, errOther
	}}}
	_, err := h.openPool(context.Background(), wasm.Config{CacheDir: "/var/cache/rl"})
	require.ErrorIs(t, err, errOther)
	require.Equal(t, []string{"/var/cache/rl", ""}, dirs)
	require.Contains(t, logs.wait(t, "compilation cache failed"), errCache.Error())

	dirs = nil
	_, err = h.openPool(context.Background(), wasm.Config{})
	require.ErrorIs(t, err, errOther)
	require.Equal(t, []string{""}, dirs)
}

// TestCheckCacheDir: -wasm-cache-dir must be a private directory the
// service can write, created 0700 when missing; anything else is refused
// at start with the reason and what to do.
func TestCheckCacheDir(t *testing.T) {
	base := t.TempDir()
	require.NoError(t, checkCacheDir(""))

	fresh := filepath.Join(base, "a", "cache")
	require.NoError(t, checkCacheDir(fresh))
	fi, err := os.Stat(fresh)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
	require.NoError(t, checkCacheDir(fresh), "again, existing")
	entries, err := os.ReadDir(fresh)
	require.NoError(t, err)
	require.Empty(t, entries, "the probe is removed")

	file := filepath.Join(base, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	require.ErrorContains(t, checkCacheDir(file), "is not a directory")
	require.ErrorContains(t, checkCacheDir(filepath.Join(file, "sub")), "not a directory")

	open := filepath.Join(base, "open")
	require.NoError(t, os.Mkdir(open, 0o700))
	require.NoError(t, os.Chmod(open, 0o777))
	err = checkCacheDir(open)
	require.ErrorContains(t, err, "chmod go-w")
	require.ErrorContains(t, err, open)
	require.NoError(t, os.Chmod(open, 0o770))
	require.ErrorContains(t, checkCacheDir(open), "chmod go-w", "group-writable")

	other := filepath.Join(base, "other")
	require.NoError(t, os.Mkdir(other, 0o700))
	if os.Getuid() == 0 {
		// root writes anywhere: the owner check is the one to see.
		require.NoError(t, os.Chown(other, 65534, 65534))
		require.ErrorContains(t, checkCacheDir(other), "is owned by uid 65534")
	} else {
		require.NoError(t, os.Chmod(other, 0o500))
		require.ErrorContains(t, checkCacheDir(other), "is not writable by the service")
	}
}

// TestRunRefusesBadCacheDir: Run checks -wasm-cache-dir before serving.
func TestRunRefusesBadCacheDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	require.NoError(t, os.Mkdir(dir, 0o777))
	require.NoError(t, os.Chmod(dir, 0o777))
	_, _, err := runHost(t, RunConfig{WasmCacheDir: dir, Logger: slog.New(slog.DiscardHandler)})
	require.ErrorContains(t, err, "-wasm-cache-dir")
}

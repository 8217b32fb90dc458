package service

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/testkit/await"
	"github.com/rlcore/rl/internal/testkit/hangup"
)

// lockedBuffer is a log's output, written by the service's goroutines and
// read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor waits until cond holds, bounded only by the test's deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	await.Until(t, what, cond)
}

// TestProxySettlesWhenClientHangsUp: a client that resets its connection
// in the middle of a large body pays the actual cost the upstream reported
// in its response header, not the estimate: the proxy (a reverse proxy,
// which panics with http.ErrAbortHandler when its client goes away) used
// to skip the settle, so that hanging up after reading 0.2, 10 or 15 MB of
// a 20 MB answer cost 100 of a 1000-an-hour limit instead of 900, again
// and again, with nothing logged or counted. A response cut off before it
// reported the cost (in a trailer, after the body) is counted as a failed
// settle and logged, and is not a store error.
func TestProxySettlesWhenClientHangsUp(t *testing.T) {
	const size = 20 << 20
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Reply-As") == "trailer" {
			w.Header().Set("Trailer", "X-Tokens-Used")
		} else {
			w.Header().Set("X-Tokens-Used", "900")
		}
		chunk := make([]byte, 64<<10)
		for n := size; n > 0; n -= len(chunk) {
			if _, err := w.Write(chunk[:min(n, len(chunk))]); err != nil {
				return
			}
		}
		w.Header().Set("X-Tokens-Used", "900")
	}))
	t.Cleanup(up.Close)
	logs := &lockedBuffer{}
	e := newEnv(t, `
upstream: `+up.URL+`
rules:
  - {name: llm, endpoint: /v1/chat, key_by: "header:X-User", strategy: fixed, limit: 1000, window: 1h,
     cost: 100, response_cost_header: X-Tokens-Used}
`, func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	const (
		settled     = `rl_settles_total{result="settled",rule="llm"}`
		failed      = `rl_settles_total{result="failed",rule="llm"}`
		storeErrors = `rl_store_errors_total{rule="llm"}`
	)
	addr := e.srv.Listener.Addr().String()
	remaining := func(user string) int64 {
		t.Helper()
		return e.post(t, "peek", `{"rule":"llm","key":"`+user+`","cost":0}`).decision(t).Remaining
	}

	for i, read := range []int64{200 << 10, 10 << 20, 15 << 20} {
		user := "header-" + strconv.Itoa(i)
		resp := hangup.Get(t, addr, "/v1/chat", read, "X-User", user)
		require.Equal(t, 200, resp.StatusCode)
		require.Empty(t, resp.Header.Values("X-Tokens-Used"))
		e.waitMetric(t, settled, float64(i+1))
		require.Equal(t, int64(100), remaining(user), "read %d bytes, then hung up: charged 900, not the estimate", read)
	}
	// The same client again and again: its debt grows, and it is denied.
	for range 2 {
		resp := hangup.Get(t, addr, "/v1/chat", 200<<10, "X-User", "again")
		require.Equal(t, 200, resp.StatusCode)
	}
	e.waitMetric(t, settled, 5)
	require.Equal(t, 429, e.do(t, "GET", "/v1/chat", "", "X-User", "again").code, "900 + 900 of 1000")

	// The cost comes in a trailer, after the body: cut off before it.
	resp := hangup.Get(t, addr, "/v1/chat", 200<<10, "X-User", "trailer", "X-Reply-As", "trailer")
	require.Equal(t, 200, resp.StatusCode)
	e.waitMetric(t, failed, 1)
	require.Equal(t, int64(900), remaining("trailer"), "the estimate stands")
	waitFor(t, "the failed settle's log line", func() bool {
		return strings.Contains(logs.String(), "proxied response cut off before it reported its cost")
	})
	require.Zero(t, e.metric(t, storeErrors), "not the store's failure")
	require.Equal(t, float64(5), e.metric(t, settled))
}

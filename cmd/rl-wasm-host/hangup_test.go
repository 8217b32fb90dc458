package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/testkit/hangup"
)

// TestProxyClientHangsUp: through the real binary's proxy, a client that
// resets its connection in the middle of a 20 MB body, after the
// upstream reported the actual cost (900) in its header, is charged 900,
// not the estimate (100): hanging up used to escape the settle, again and
// again, with nothing logged or counted. Cut off before a cost reported in
// a trailer, the settle is counted as failed and logged.
func TestProxyClientHangsUp(t *testing.T) {
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
	defer up.Close()
	cfg := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, cfg, fmt.Sprintf(`upstream: %s
rules:
  - {name: llm, endpoint: /v1/chat, key_by: "header:X-User", strategy: fixed, limit: 1000, window: 1h,
     cost: 100, response_cost_header: X-Tokens-Used}
`, up.URL))
	p := start(t, "-config", cfg, "-decider", "native")
	addr := strings.TrimPrefix(p.base, "http://")
	metric := func(series string) string {
		_, _, body := call(t, "GET", p.api+"/metrics", "")
		for line := range strings.SplitSeq(body, "\n") {
			if v, ok := strings.CutPrefix(line, series+" "); ok {
				return v
			}
		}
		return ""
	}
	waitMetric := func(series, want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for metric(series) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s is %q, want %s\n%s", series, metric(series), want, p.log())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	remaining := func(user string) int64 {
		t.Helper()
		code, _, body := call(t, "POST", p.api+"/v1/ratelimit/peek", `{"rule":"llm","key":"`+user+`","cost":0}`)
		require.Equal(t, 200, code, body)
		var d struct{ Remaining int64 }
		require.NoError(t, json.Unmarshal([]byte(body), &d))
		return d.Remaining
	}
	const settled, failed = `rl_settles_total{result="settled",rule="llm"}`, `rl_settles_total{result="failed",rule="llm"}`
	for i, read := range []int64{200 << 10, 10 << 20, 15 << 20} {
		user := "u" + strconv.Itoa(i)
		resp := hangup.Get(t, addr, "/v1/chat", read, "X-User", user)
		require.Equal(t, 200, resp.StatusCode)
		waitMetric(settled, strconv.Itoa(i+1))
		require.Equal(t, int64(100), remaining(user), "read %d bytes, then hung up: charged 900", read)
	}
	resp := hangup.Get(t, addr, "/v1/chat", 200<<10, "X-User", "trailer", "X-Reply-As", "trailer")
	require.Equal(t, 200, resp.StatusCode)
	waitMetric(failed, "1")
	require.Equal(t, int64(900), remaining("trailer"), "the estimate stands")
	p.waitLog(t, "proxied response cut off before it reported its cost")
}

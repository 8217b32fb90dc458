package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rlcore/rl/internal/testkit/await"
	"github.com/rlcore/rl/internal/util/redact"
)

// -log-denials and -log-level debug: every front end that decides (the
// proxy, the decision API, the gRPC rate limit service) logs a denial line
// naming the rule, the limit and the key's digest, never the key; debug
// adds a line per decision; the lines written and those suppressed
// (rl_denial_log_suppressed_total) add up to the denials.
func TestDenialLog(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer up.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "rules.json")
	writeFile(t, cfg, fmt.Sprintf(`{"upstream": %q, "rules": [
		{"name":"pay","endpoint":"/v1/pay","strategy":"fixed","limit":1,"window":"1h","key_by":"header:X-User"}]}`, up.URL))
	rlsPath := filepath.Join(dir, "ratelimit.yaml")
	writeFile(t, rlsPath, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	p := start(t, "-config", cfg, "-decider", "native", "-log-denials", "1000", "-log-level", "debug",
		"-grpc-listen", "127.0.0.1:0", "-rls-config", rlsPath)

	const proxyKey, apiKey, rlsValue = "sk_proxy_7c1d0e8a", "sk_api_5b2f9a41", "203.0.113.77"
	for i, want := range []int{200, 429} {
		code, _, body := call(t, "GET", p.base+"/v1/pay", "", "X-User", proxyKey)
		require.Equal(t, want, code, "proxy request %d: %s", i, body)
	}
	for i, want := range []int{200, 429} {
		code, _, body := call(t, "POST", p.api+"/v1/ratelimit/check", fmt.Sprintf(`{"rule":"pay","key":%q}`, apiKey))
		require.Equal(t, want, code, "check %d: %s", i, body)
	}
	var rec struct{ Addr string }
	require.NoError(t, json.Unmarshal([]byte(p.waitLog(t, `"role":"grpc"`)), &rec))
	conn, err := grpc.NewClient(rec.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		r, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
			Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: rlsValue}}}}})
		require.NoError(t, err)
		require.Equal(t, want, r.OverallCode, "rls request %d", i)
	}

	// A denial line for each front end, and debug lines for the allowed.
	type line struct {
		Level, Msg, Rule, Limit, Op, Outcome string
		KeyDigest                            string `json:"key_digest"`
		RetryAfterMS                         *int64 `json:"retry_after_ms"`
		Suppressed                           *int64
	}
	parse := func(s string) line {
		var l line
		require.NoError(t, json.Unmarshal([]byte(s), &l), s)
		return l
	}
	for _, want := range []struct{ rule, limit, digest string }{
		{"pay", "pay", redact.Digest(proxyKey)},
		{"pay", "pay", redact.Digest(apiKey)},
		{"rls:edge", "", ""},
	} {
		l := parse(waitLogged(t, p, `"msg":"request denied"`, `"rule":"`+want.rule+`"`, want.digest))
		require.Equal(t, "INFO", l.Level)
		if want.limit != "" {
			require.Equal(t, want.limit, l.Limit, "a one-limit rule's limit is named after the rule")
		} else {
			require.NotEmpty(t, l.Limit)
		}
		require.Len(t, l.KeyDigest, 16)
		require.NotNil(t, l.RetryAfterMS)
		require.Greater(t, *l.RetryAfterMS, int64(0))
		require.NotNil(t, l.Suppressed)
		d := parse(waitLogged(t, p, `"msg":"decision"`, `"rule":"`+want.rule+`"`, `"outcome":"allowed"`, want.digest))
		require.Equal(t, "DEBUG", d.Level)
	}
	_, _, metrics := call(t, "GET", p.api+"/metrics", "")
	require.Contains(t, metrics, "rl_denial_log_suppressed_total 0")

	// A flood: the lines written and those left out add up to the denials.
	const flood = 300
	for i := range flood {
		code, _, body := call(t, "POST", p.api+"/v1/ratelimit/check", fmt.Sprintf(`{"rule":"pay","key":%q}`, apiKey))
		require.Equal(t, 429, code, "flood %d: %s", i, body)
	}
	_, _, metrics = call(t, "GET", p.api+"/metrics", "")
	m := regexp.MustCompile(`(?m)^rl_denial_log_suppressed_total (\d+)$`).FindStringSubmatch(metrics)
	require.NotNil(t, m, metrics)
	suppressed, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	denialLines := func() int { return strings.Count(p.log(), `"msg":"request denied"`) }
	await.Until(t, "the denial lines to be read", func() bool { return denialLines()+suppressed >= 3+flood })
	require.Equal(t, 3+flood, denialLines()+suppressed)

	for _, raw := range []string{proxyKey, apiKey, rlsValue} {
		require.NotContains(t, p.log(), raw, "a line holds a key")
	}
}

// Without -log-denials, at info level: no decision line, no metric.
func TestDenialLogOffByDefault(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "rules.json")
	writeFile(t, cfg, `{"rules": [{"name":"pay","strategy":"fixed","limit":1,"window":"1h"}]}`)
	p := start(t, "-config", cfg, "-decider", "native")
	for _, want := range []int{200, 429, 429} {
		code, _, body := call(t, "POST", p.api+"/v1/ratelimit/check", `{"rule":"pay","key":"k"}`)
		require.Equal(t, want, code, body)
	}
	_, _, metrics := call(t, "GET", p.api+"/metrics", "")
	require.Contains(t, metrics, `rl_decisions_total{outcome="denied",rule="pay"} 2`)
	require.NotContains(t, metrics, "rl_denial_log_suppressed_total")
	require.NotContains(t, p.log(), `"request denied"`)
	require.NotContains(t, p.log(), `"msg":"decision"`)
}

// -log-denials out of range is refused, naming the range.
func TestLogDenialsFlag(t *testing.T) {
	for _, v := range []string{"-1", "1000001"} {
		code, out := runBinary(t, "-config", "sample.yaml", "-log-denials", v)
		require.Equal(t, 2, code, out)
		require.Contains(t, out, "-log-denials "+v+": want 0 (off) to 1000000 lines a second")
	}
}

// runBinary runs rl-wasm-host to its exit, returning its exit status and
// output.
func runBinary(t *testing.T, args ...string) (int, string) {
	t.Helper()
	out, err := exec.Command(binary(t), args...).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	require.NoError(t, err)
	return 0, string(out)
}

package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/testkit/await"
	"github.com/rlcore/rl/internal/testkit/fakestore"
	"github.com/rlcore/rl/store"
)

// upstream records what reaches it.
type upstream struct {
	srv  *httptest.Server
	hits atomic.Int64
	last atomic.Pointer[http.Request]
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		u.last.Store(r)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Upstream", "yes")
		w.Header().Set("X-RateLimit-Remaining", "7") // its own, dropped on decided responses
		w.Header().Set("RateLimit", `"upstream";r=7;t=1`)
		fmt.Fprintf(w, "upstream %s %s", r.Method, r.URL.Path)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func TestProxyFilter(t *testing.T) {
	up := newUpstream(t)
	e := newEnv(t, `
upstream: `+up.srv.URL+`
trusted_proxies: [127.0.0.1]
rules:
  - `+hosted+`
  - {name: ip, endpoint: /v1/, strategy: fixed, limit: 2, window: 1m}
  - {name: host, endpoint: /v1/, host: api.example.com, strategy: fixed, limit: 1, window: 1m, key_by: global}
  - {name: posts, endpoint: /v1/, methods: [POST], strategy: fixed, limit: 1, window: 1m, key_by: "query:user"}
  - {name: wild, endpoint: /w, host: "*.example.org", strategy: fixed, limit: 1, window: 1m, key_by: "header:X-User"}
`, nil)

	// The hosted rule keys by API key; its headers are draft-11 and X-RateLimit.
	r := e.do(t, "POST", "/v1/pay", "{}", "Authorization", "Bearer k1")
	require.Equal(t, 200, r.code)
	require.Equal(t, "upstream POST /v1/pay", string(r.body))
	require.Equal(t, "yes", r.h.Get("X-Upstream"))
	require.Equal(t, `"default";q=100;w=10`, r.h.Get("RateLimit-Policy"))
	require.Equal(t, []string{"99"}, r.h.Values("X-RateLimit-Remaining"), "the upstream's own was dropped")
	require.Equal(t, []string{`"default";r=99;t=1`, `"upstream";r=7;t=1`}, r.h.Values("RateLimit"), "draft-11 fields form a list")
	r = e.do(t, "GET", "/v1/pay/refund", "")
	require.Equal(t, 400, r.code, "no API key")
	require.Contains(t, string(r.body), "Authorization: Bearer")

	// /v1/payments is not under /v1/pay: the /v1/ rule, keyed by client IP
	// through the trusted loopback proxy's X-Forwarded-For.
	for i := range 3 {
		r = e.do(t, "GET", "/v1/payments", "", "X-Forwarded-For", "203.0.113.5")
		if i < 2 {
			require.Equal(t, 200, r.code)
		}
	}
	require.Equal(t, 429, r.code)
	require.Equal(t, "Rate limit exceeded\n", string(r.body))
	require.Equal(t, "50", r.h.Get("Retry-After"))
	require.Equal(t, 200, e.do(t, "GET", "/v1/payments", "", "X-Forwarded-For", "203.0.113.6").code, "another client")

	// The host rule beats the plain /v1/ rule on its host.
	require.Equal(t, 200, e.do(t, "GET", "/v1/x", "", "Host", "API.example.com:443").code)
	require.Equal(t, 429, e.do(t, "GET", "/v1/y", "", "Host", "api.example.com").code)
	// The method rule beats the plain one for POST.
	require.Equal(t, 200, e.do(t, "POST", "/v1/z?user=u1", "").code)
	require.Equal(t, 429, e.do(t, "POST", "/v1/z?user=u1", "").code)
	require.Equal(t, 400, e.do(t, "POST", "/v1/z", "").code, "no user query parameter")
	// Wildcard host.
	require.Equal(t, 200, e.do(t, "GET", "/w", "", "Host", "a.example.org", "X-User", "x").code)
	require.Equal(t, 429, e.do(t, "GET", "/w", "", "Host", "b.example.org", "X-User", "x").code)
	require.Equal(t, 200, e.do(t, "GET", "/w", "", "Host", "example.org").code, "no rule matches: forwarded unlimited")

	// Unmatched paths are forwarded without headers.
	before := up.hits.Load()
	r = e.do(t, "GET", "/static/app.js", "")
	require.Equal(t, 200, r.code)
	require.Equal(t, []string{`"upstream";r=7;t=1`}, r.h.Values("RateLimit"), "the upstream's alone")
	require.Equal(t, "7", r.h.Get("X-RateLimit-Remaining"))
	require.Equal(t, before+1, up.hits.Load())
	// Denied requests never reach the upstream.
	before = up.hits.Load()
	e.do(t, "GET", "/v1/payments", "", "X-Forwarded-For", "203.0.113.5")
	require.Equal(t, before, up.hits.Load())
	// The upstream sees the client in X-Forwarded-For.
	e.do(t, "GET", "/static/x", "", "X-Forwarded-For", "203.0.113.9")
	require.Equal(t, "203.0.113.9, 127.0.0.1", up.last.Load().Header.Get("X-Forwarded-For"))

	m := string(e.do(t, "GET", "/metrics", "").body)
	require.Contains(t, m, `rl_decisions_total{outcome="denied",rule="ip"} 2`)
	require.Contains(t, m, `rl_rejected_requests_total{reason="missing_key"} 2`)
}

func TestProxyCostAndShape(t *testing.T) {
	up := newUpstream(t)
	e := newEnv(t, `
upstream: `+up.srv.URL+`
rules:
  - {name: c, endpoint: /c, strategy: token, limit: 10, window: 1m, cost_header: X-Cost, key_by: global}
  - {name: s, endpoint: /s, strategy: leaky, limit: 5, window: 100ms, shape: true, key_by: global}
`, nil)
	r := e.do(t, "GET", "/c", "", "X-Cost", "7")
	require.Equal(t, 200, r.code)
	require.Equal(t, "3", r.h.Get("X-RateLimit-Remaining"))
	require.Equal(t, 200, e.do(t, "GET", "/c", "").code, "absent header: the rule's cost, 1")
	r = e.do(t, "GET", "/c", "", "X-Cost", "3")
	require.Equal(t, 429, r.code)
	r = e.do(t, "GET", "/c", "", "X-Cost", "11")
	require.Equal(t, 429, r.code)
	require.Contains(t, string(r.body), "exceeds the limit")
	require.Empty(t, r.h.Get("Retry-After"))
	for _, bad := range []string{"-1", "x", "1.5", "99999999999999999999"} {
		r = e.do(t, "GET", "/c", "", "X-Cost", bad)
		require.Equal(t, 400, r.code, bad)
	}

	// Shaping: the leaky bucket spaces admissions 20 ms apart; with the
	// test's frozen clock the third request's delay is 40 ms.
	start := time.Now()
	for range 3 {
		require.Equal(t, 200, e.do(t, "GET", "/s", "").code)
	}
	require.GreaterOrEqual(t, time.Since(start), 35*time.Millisecond)
}

func TestNoUpstream(t *testing.T) {
	e := newEnv(t, `rules: [`+hosted+`]`, nil)
	r := e.do(t, "GET", "/v1/pay", "")
	require.Equal(t, 404, r.code)
	require.Contains(t, string(r.body), "no upstream")
	// The decision API still decides the hosted rule by name.
	require.Equal(t, 200, e.post(t, "check", `{"rule":"/v1/pay","key":"k"}`).code)
}

func TestDemoUpstreamAndBadGateway(t *testing.T) {
	e := newEnv(t, "upstream: demo\nrules: ["+hosted+"]", nil)
	r := e.do(t, "GET", "/anything", "")
	require.Equal(t, 200, r.code)
	var body map[string]string
	require.NoError(t, json.Unmarshal(r.body, &body))
	require.Equal(t, "demo", body["upstream"])

	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	e = newEnv(t, "upstream: "+dead.URL+"\nrules: ["+hosted+"]", nil)
	require.Equal(t, 502, e.do(t, "GET", "/x", "").code)
}

func TestProxyStoreFailure(t *testing.T) {
	up := newUpstream(t)
	e := newEnv(t, `
upstream: `+up.srv.URL+`
rules:
  - {name: open, endpoint: /open, strategy: fixed, limit: 1, window: 1m, fail_open: true}
  - {name: closed, endpoint: /closed, strategy: fixed, limit: 1, window: 1m}
`, func(o *Options) { o.Store = down(t) })
	require.Equal(t, 200, e.do(t, "GET", "/open", "").code)
	r := e.do(t, "GET", "/closed", "")
	require.Equal(t, 503, r.code)
	require.Equal(t, int64(1), up.hits.Load())
	require.Contains(t, string(e.do(t, "GET", "/metrics", "").body), `rate_limiter_fail_open_total{rule="open"} 1`)
}

func TestProxyBodyLimit(t *testing.T) {
	up := newUpstream(t)
	e := newEnv(t, "upstream: "+up.srv.URL+"\nrules: ["+hosted+"]", func(o *Options) { o.ProxyMaxBodyBytes = 100 })
	require.Equal(t, 413, e.do(t, "POST", "/x", strings.Repeat("x", 200)).code)
	require.Equal(t, 200, e.do(t, "POST", "/x", strings.Repeat("x", 50)).code)
	// A chunked body (no Content-Length) is cut while it streams.
	req, err := http.NewRequest("POST", e.srv.URL+"/x", io.MultiReader(strings.NewReader(strings.Repeat("y", 150))))
	require.NoError(t, err)
	req.ContentLength = -1
	resp, err := e.srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 413, resp.StatusCode)
}

// Reloads swap the rules atomically while requests run: none fails, and
// an invalid file keeps the rules in force.
func TestReloadUnderLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	write := func(limit int) {
		require.NoError(t, os.WriteFile(path, fmt.Appendf(nil, "upstream: demo\nrules: [{name: r, endpoint: /, key_by: global, strategy: fixed, limit: %d, window: 1h}]\n", limit), 0o600))
	}
	write(1_000_000)
	cfg, err := LoadConfig(path)
	require.NoError(t, err)
	e := newEnv(t, "rules: [{name: placeholder, strategy: fixed, limit: 1, window: 1s}]", nil)
	require.NoError(t, e.svc.SetConfig(cfg))

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var bad atomic.Int64
	var done atomic.Int64
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				r1, err := e.srv.Client().Get(e.srv.URL + "/p")
				if err != nil {
					bad.Add(1)
					continue
				}
				io.Copy(io.Discard, r1.Body)
				r1.Body.Close()
				if r1.StatusCode != 200 {
					bad.Add(1)
				}
				done.Add(1)
			}
		})
	}
	// Requests answered after each reload: the reloads interleave with
	// them however slow the machine is.
	answered := func() {
		n := done.Load() + bad.Load()
		await.Until(t, "a request answered after the reload", func() bool { return done.Load()+bad.Load() > n })
	}
	for i := range 20 {
		write(1_000_000 + i)
		require.NoError(t, e.svc.Reload(path))
		answered()
	}
	require.NoError(t, os.WriteFile(path, []byte("rules: [{name: r, strategy: nope}]"), 0o600))
	err = e.svc.Reload(path)
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	answered()
	cancel()
	wg.Wait()
	require.Zero(t, bad.Load(), "requests failed during reloads")
	require.Positive(t, done.Load())
	require.Equal(t, int64(1_000_019), e.svc.Config().Rules[0].Limits[0].Limit.Limit, "the invalid file left the last good rules")
	m := string(e.do(t, "GET", "/metrics", "").body)
	require.Contains(t, m, `rl_config_reloads_total{result="success"} 20`)
	require.Contains(t, m, `rl_config_reloads_total{result="failure"} 1`)
	require.Contains(t, m, "rl_config_last_reload_success 0")
}

// API keys are kept as digests: long tokens work, secrets stay out of the
// store, and the decision API reaches the same state through the digest.
func TestAPIKeysAreHashed(t *testing.T) {
	up := newUpstream(t)
	e := newEnv(t, "upstream: "+up.srv.URL+"\nrules: [{name: pay, endpoint: /pay, key_by: api_key, strategy: fixed, limit: 2, window: 1m}]", nil)
	jwt := "eyJ" + strings.Repeat("a", 600)
	require.Equal(t, 200, e.do(t, "GET", "/pay", "", "Authorization", "Bearer "+jwt).code)
	digest := APIKeyDigest(jwt)
	require.Equal(t, "sha256:", digest[:7])
	require.Len(t, digest, 7+32)
	r := e.post(t, "peek", `{"rule":"pay","key":"`+digest+`","cost":0}`)
	require.Equal(t, int64(1), r.decision(t).Remaining, "the proxy's take is visible through the digest")
	require.Equal(t, 200, e.post(t, "reset", `{"rule":"pay","key":"`+digest+`"}`).code)
	require.Equal(t, 200, e.do(t, "GET", "/pay", "", "Authorization", "Bearer "+jwt).code)
	require.Equal(t, 200, e.do(t, "GET", "/pay", "", "Authorization", "Bearer "+jwt).code)
	require.Equal(t, 429, e.do(t, "GET", "/pay", "", "Authorization", "Bearer "+jwt).code)
}

// The proxy answers a failed decision by the one failure rule
// (outage.Class): fail_open only on an outage (forwarded without our
// fields, the upstream's kept), load and lone timeouts refused 503 with
// Retry-After, a corrupt state 500, never forwarded and never admitted by
// fail_open (it was, before the rule was one: the service's copy answered
// it by the fail policy, httplimit's with 500).
func TestProxyAnswersFailures(t *testing.T) {
	const unavailable, overloaded, internal = "Rate limiter unavailable\n", "Rate limiter overloaded; retry later\n", "Rate limiter error\n"
	for _, c := range []struct {
		name       string
		err        error
		open       bool
		code       int
		body       string
		outcome    string
		overloaded bool
	}{
		{"outage, fail_open", fmt.Errorf("dial: %w", store.ErrUnavailable), true, 200, "upstream GET /r", "fail_open", false},
		{"outage, closed", fmt.Errorf("dial: %w", store.ErrUnavailable), false, 503, unavailable, "fail_closed", false},
		{"busy, fail_open", fmt.Errorf("pool: %w", store.ErrBusy), true, 503, overloaded, "fail_closed", true},
		{"busy, closed", fmt.Errorf("pool: %w", store.ErrBusy), false, 503, overloaded, "fail_closed", true},
		{"one timeout is load", fmt.Errorf("query: %w: %w", store.ErrUnavailable, context.DeadlineExceeded), true, 503, unavailable, "fail_closed", false},
		{"not an outage", errors.New("protocol error"), true, 503, unavailable, "fail_closed", false},
		{"corrupt state, fail_open", core.ErrState, true, 500, internal, "fail_closed", false},
		{"corrupt state, closed", core.ErrState, false, 500, internal, "fail_closed", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := newUpstream(t)
			e := newEnv(t, fmt.Sprintf("upstream: %s\nrules: [{name: r, endpoint: /r, strategy: fixed, limit: 5, window: 1m, fail_open: %t}]", up.srv.URL, c.open),
				func(o *Options) { o.Store = failing(t, c.err) })
			r := e.do(t, "GET", "/r", "")
			require.Equal(t, c.code, r.code)
			require.Equal(t, c.body, string(r.body))
			require.Empty(t, r.h.Get("RateLimit-Policy"), "no decision, none of our fields")
			if c.code == 200 {
				require.Equal(t, "7", r.h.Get("X-RateLimit-Remaining"), "the upstream's own fields, kept")
				require.Empty(t, r.h.Get("Retry-After"))
			} else {
				if c.code == 503 {
					require.Equal(t, "1", r.h.Get("Retry-After"))
				}
				require.Zero(t, up.hits.Load(), "never forwarded")
			}
			m := string(e.do(t, "GET", "/metrics", "").body)
			require.Contains(t, m, `rl_decisions_total{outcome="`+c.outcome+`",rule="r"} 1`)
			require.Contains(t, m, `rl_store_errors_total{rule="r"} 1`)
			require.Contains(t, m, `rl_decision_duration_seconds_count{source="proxy"} 1`)
			if c.outcome == "fail_open" {
				require.Contains(t, m, `rate_limiter_fail_open_total{rule="r"} 1`)
			}
			if c.overloaded {
				require.Contains(t, m, `rl_overload_rejected_total{reason="store_busy"} 1`)
			}
		})
	}
}

// A request the proxy cannot key or cost is answered 400, saying what to
// send, and counted by reason.
func TestProxyBadRequests(t *testing.T) {
	up := newUpstream(t)
	e := newEnv(t, "upstream: "+up.srv.URL+`
rules:
  - {name: k, endpoint: /k, key_by: "header:X-User", strategy: token, limit: 10, window: 1m, cost_header: X-Cost, min_cost: 2}
  - {name: q, endpoint: /q, key_by: "query:u", strategy: token, limit: 10, window: 1m}
  - {name: a, endpoint: /a, key_by: api_key, strategy: token, limit: 10, window: 1m}
`, nil)
	for _, c := range []struct {
		name, path, reason, body string
		hdr                      []string
	}{
		{"no header", "/k", "missing_key", "Missing rate-limit key: send the X-User header\n", nil},
		{"no query parameter", "/q", "missing_key", "Missing rate-limit key: send the u query parameter\n", nil},
		{"no API key", "/a", "missing_key", "Missing rate-limit key: send \"Authorization: Bearer <key>\"\n", nil},
		{"key too long", "/k", "invalid_key", "Invalid rate-limit key (header:X-User): 300 bytes (302 with the base key \"k\"), longer than 256\n", []string{"X-User", strings.Repeat("u", 300)}},
		{"cost not a number", "/k", "invalid_cost", "Invalid rate-limit cost: cost \"1e3\" is not an integer between 2 and " + strconv.FormatInt(core.MaxCost, 10) + "\n", []string{"X-User", "u", "X-Cost", "1e3"}},
		{"cost under min_cost", "/k", "invalid_cost", "Invalid rate-limit cost: cost \"1\" is not an integer between 2 and " + strconv.FormatInt(core.MaxCost, 10) + "\n", []string{"X-User", "u", "X-Cost", "1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(t, "GET", c.path, "", c.hdr...)
			require.Equal(t, 400, r.code)
			require.Equal(t, c.body, string(r.body))
		})
	}
	require.Zero(t, up.hits.Load())
	m := string(e.do(t, "GET", "/metrics", "").body)
	require.Contains(t, m, `rl_rejected_requests_total{reason="missing_key"} 3`)
	require.Contains(t, m, `rl_rejected_requests_total{reason="invalid_key"} 1`)
	require.Contains(t, m, `rl_rejected_requests_total{reason="invalid_cost"} 2`)
	require.Equal(t, 200, e.do(t, "GET", "/k", "", "X-User", "u", "X-Cost", "2").code)
}

// Beyond MaxInFlightPerKey the proxy answers 503 at once, never forwarded,
// while other keys are still decided.
func TestProxyKeyInFlight(t *testing.T) {
	up := newUpstream(t)
	bs := fakestore.New(t, fakestore.Config{})
	held := bs.Hold(fakestore.All) // every decision, until released
	e := newEnv(t, "upstream: "+up.srv.URL+"\nrules: [{name: r, endpoint: /, key_by: \"header:X-User\", strategy: fixed, limit: 5, window: 1m, fail_open: true}]",
		func(o *Options) { o.Store = bs; o.MaxInFlightPerKey = 1 })
	var wg sync.WaitGroup
	wg.Go(func() { require.Equal(t, 200, e.do(t, "GET", "/x", "", "X-User", "hot").code) })
	<-held.Arrived()
	r := e.do(t, "GET", "/x", "", "X-User", "hot")
	require.Equal(t, 503, r.code)
	require.Equal(t, "1", r.h.Get("Retry-After"))
	require.Equal(t, "Rate limiter overloaded; retry later\n", string(r.body))
	wg.Go(func() { require.Equal(t, 200, e.do(t, "GET", "/x", "", "X-User", "cold").code) })
	<-held.Arrived()
	held.Release()
	wg.Wait()
	require.Equal(t, int64(2), up.hits.Load())
	m := string(e.do(t, "GET", "/metrics", "").body)
	require.Contains(t, m, `rl_overload_rejected_total{reason="key_in_flight"} 1`)
	require.Contains(t, m, `rl_decisions_total{outcome="fail_closed",rule="r"} 1`)
}

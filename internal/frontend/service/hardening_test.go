package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/testkit/fakestore"
	"github.com/rlcore/rl/memstore"
	"github.com/rlcore/rl/store"
)

func tokenHash(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])
}

// doURL sends one request to base+path with headers in pairs.
func doURL(t *testing.T, method, url, body string, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return reply{resp.StatusCode, resp.Header, b}
}

// Issue 9.1: a proxied request is never free. X-Cost: 0 on an exhausted
// rule was admitted and forwarded.
func TestCostHeaderNeverFree(t *testing.T) {
	up := newUpstream(t)
	e := newEnv(t, `
upstream: `+up.srv.URL+`
rules:
  - {name: export, endpoint: /export, key_by: global, strategy: fixed, limit: 3, window: 1m, cost_header: X-Cost}
  - {name: bulk, endpoint: /bulk, key_by: global, strategy: fixed, limit: 100, window: 1m, cost_header: X-Cost, min_cost: 5}
`, nil)
	for range 3 {
		require.Equal(t, 200, e.do(t, "GET", "/export", "").code)
	}
	require.Equal(t, 429, e.do(t, "GET", "/export", "").code)
	hits := up.hits.Load()
	for i := range 10 {
		r := e.do(t, "GET", "/export", "", "X-Cost", "0")
		require.Equal(t, 400, r.code, "try %d: %s", i, r.body)
	}
	for _, bad := range []string{"-1", "+1", "1.0", "1e3", "0x10", "", "١", "99999999999999999999", "4611686018427387905", "1,1"} {
		r := e.do(t, "GET", "/export", "", "X-Cost", bad)
		require.Equal(t, 400, r.code, "X-Cost %q: %s", bad, r.body)
	}
	// Two cost headers are ambiguous.
	req, _ := http.NewRequest("GET", e.srv.URL+"/export", nil)
	req.Header.Add("X-Cost", "1")
	req.Header.Add("X-Cost", "0")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 400, resp.StatusCode)
	require.Equal(t, hits, up.hits.Load(), "nothing forwarded after the limit")

	// min_cost: a request asking for less than the minimum is refused.
	require.Equal(t, 400, e.do(t, "GET", "/bulk", "", "X-Cost", "4").code)
	require.Equal(t, 200, e.do(t, "GET", "/bulk", "", "X-Cost", "5").code)
	r := e.do(t, "GET", "/bulk", "")
	require.Equal(t, 200, r.code)
	require.Equal(t, "90", r.h.Get("X-RateLimit-Remaining"), "no header: the rule's cost, raised to min_cost")

	// The decision API: cost 0 only as a peek; a rule's min_cost holds.
	require.Equal(t, 400, e.post(t, "check", `{"rule":"export","key":"x","cost":0}`).code)
	require.Equal(t, 400, e.post(t, "check", `{"rule":"bulk","key":"x","cost":1}`).code)
	require.Equal(t, 200, e.post(t, "peek", `{"rule":"bulk","key":"x","cost":0}`).code)
}

func TestCostConfig(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{`rules: [{name: a, strategy: fixed, limit: 1, window: 1s, cost: 0}]`, `cost: 0 is outside [1,`},
		{`rules: [{name: a, strategy: fixed, limit: 1, window: 1s, min_cost: 0}]`, `min_cost: 0 is outside [1,`},
		{`rules: [{name: a, strategy: fixed, limit: 9, window: 1s, min_cost: 3, cost: 2}]`, `cost: 2 is below min_cost 3`},
	} {
		_, err := ParseConfig("c.yaml", "yaml", []byte(c.yaml))
		require.ErrorContains(t, err, c.want, c.yaml)
	}
}

const tokAdmin, tokCheck = "admin-token-0123456789abcdef", "check-token-0123456789abcdef"

func tokenConfig(upstream string) string {
	return `
upstream: ` + upstream + `
api_tokens:
  - {name: ops, role: admin, sha256: ` + tokenHash(tokAdmin) + `}
  - {name: edge, role: check, sha256: "sha256:` + tokenHash(tokCheck) + `"}
rules:
  - {name: r, endpoint: /r, strategy: fixed, limit: 5, window: 1m}
`
}

// Issue 9.2: on the one-listener handler the API needs a token, and roles
// separate checking from administration.
func TestAPIAuthOnSharedListener(t *testing.T) {
	up := newUpstream(t)
	e := newEnv(t, tokenConfig("https://user:hunter2secret@"+strings.TrimPrefix(up.srv.URL, "http://")), nil)
	srv := httptest.NewServer(e.svc.Handler())
	t.Cleanup(srv.Close)
	api := srv.URL + APIPrefix

	check := `{"rule":"r","key":"k"}`
	inline := `{"limits":[{"strategy":"fixed","limit":1,"window":"1m"}],"key":"k"}`
	settle := `{"rule":"r","key":"k","estimate":1,"actual":2}`
	refund := `{"rule":"r","key":"k","estimate":2,"actual":1}`
	inlineSettle := `{"limits":[{"strategy":"fixed","limit":1,"window":"1m"}],"key":"k","estimate":1,"actual":2}`
	for _, c := range []struct {
		name, method, op, body, token string
		want                          int
		code                          string
	}{
		{"no token", "POST", "check", check, "", 401, "unauthorized"},
		{"wrong token", "POST", "check", check, "nope-0123456789abcdef", 401, "unauthorized"},
		{"no token reset", "POST", "reset", check, "", 401, "unauthorized"},
		{"no token rules", "GET", "rules", "", "", 401, "unauthorized"},
		{"check token checks", "POST", "check", check, tokCheck, 200, ""},
		{"check token peeks", "POST", "peek", check, tokCheck, 200, ""},
		{"check token batch", "POST", "batch", `{"items":[` + check + `]}`, tokCheck, 200, ""},
		{"check token reset", "POST", "reset", check, tokCheck, 403, "forbidden"},
		{"check token rules", "GET", "rules", "", tokCheck, 403, "forbidden"},
		{"check token inline", "POST", "check", inline, tokCheck, 403, "forbidden"},
		{"check token inline batch", "POST", "batch", `{"items":[` + inline + `]}`, tokCheck, 403, "forbidden"},
		{"admin reset", "POST", "reset", check, tokAdmin, 200, ""},
		{"admin inline", "POST", "check", inline, tokAdmin, 200, ""},
		{"admin rules", "GET", "rules", "", tokAdmin, 200, ""},
		{"no token settle", "POST", "settle", settle, "", 401, "unauthorized"},
		{"check token settles", "POST", "settle", settle, tokCheck, 200, ""},
		{"check token refund", "POST", "settle", refund, tokCheck, 403, "forbidden"},
		{"admin refund", "POST", "settle", refund, tokAdmin, 200, ""},
		{"check token inline settle", "POST", "settle", inlineSettle, tokCheck, 403, "forbidden"},
		{"admin inline settle", "POST", "settle", inlineSettle, tokAdmin, 200, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var hdr []string
			if c.token != "" {
				hdr = []string{"Authorization", "Bearer " + c.token}
			}
			r := doURL(t, c.method, api+c.op, c.body, hdr...)
			require.Equal(t, c.want, r.code, "%s", r.body)
			if c.code != "" {
				require.Equal(t, c.code, r.errorJSON(t).Code)
			}
			if c.want == 401 {
				require.Equal(t, `Bearer realm="rl"`, r.h.Get("WWW-Authenticate"))
			}
			require.NotContains(t, string(r.body), "hunter2secret")
		})
	}
	r := doURL(t, "GET", srv.URL+"/metrics", "")
	require.Equal(t, 401, r.code, "metrics need a token on the shared listener")
	r = doURL(t, "GET", srv.URL+"/metrics", "", "Authorization", "Bearer "+tokCheck)
	require.Equal(t, 403, r.code, "metrics are an admin's (issue 19, 10)")
	r = doURL(t, "GET", srv.URL+"/metrics", "", "Authorization", "Bearer "+tokAdmin)
	require.Equal(t, 200, r.code)
	r = doURL(t, "GET", api+"rules", "", "Authorization", "Bearer "+tokAdmin)
	require.Contains(t, string(r.body), `"upstream":"https://user:xxxxx@`)
}

// Without tokens the API answers only on its own listener, where every
// caller is an admin; the one-listener handler then refuses everyone.
func TestAPIWithoutTokens(t *testing.T) {
	e := newEnv(t, `rules: [{name: r, strategy: fixed, limit: 5, window: 1m}]`, nil)
	shared := httptest.NewServer(e.svc.Handler())
	t.Cleanup(shared.Close)
	require.Equal(t, 401, doURL(t, "POST", shared.URL+APIPrefix+"reset", `{"rule":"r","key":"k"}`).code)
	own := httptest.NewServer(e.svc.APIHandler())
	t.Cleanup(own.Close)
	require.Equal(t, 200, doURL(t, "POST", own.URL+APIPrefix+"reset", `{"rule":"r","key":"k"}`).code)
	proxy := httptest.NewServer(e.svc.ProxyHandler())
	t.Cleanup(proxy.Close)
	r := doURL(t, "POST", proxy.URL+APIPrefix+"reset", `{"rule":"r","key":"k"}`)
	require.NotContains(t, string(r.body), `"reset"`, "the proxy listener never serves the API")
}

func TestTokenConfigErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{`api_tokens: [{name: a, role: admin, sha256: secret}]`, `api_tokens[0].sha256: want the 64 hex digits`},
		{`api_tokens: [{name: a, role: root, sha256: ` + tokenHash("x") + `}]`, `api_tokens[0].role: "root": want admin, settle or check`},
		{`api_tokens: [{name: a, role: admin}]`, `api_tokens[0].sha256: missing`},
		{`api_tokens: [{name: a, role: admin, sha256: ` + tokenHash("x") + `}, {name: b, role: check, sha256: ` + tokenHash("x") + `}]`, `listed twice`},
		{`max_inline_limits: 17`, `max_inline_limits: 17 is outside [1, 16]`},
	} {
		_, err := ParseConfig("c.yaml", "yaml", []byte(c.yaml+"\nrules: [{name: r, strategy: fixed, limit: 1, window: 1s}]"))
		require.ErrorContains(t, err, c.want, c.yaml)
	}
}

// Issue 9.6: the decision API caps inline limits per request.
func TestInlineLimitsCapped(t *testing.T) {
	e := newEnv(t, "max_inline_limits: 2\nrules: [{name: r, strategy: fixed, limit: 1, window: 1m}]", nil)
	three := `{"key":"k","limits":[{"name":"a","strategy":"sliding_log","limit":4096,"window":"1m"},{"name":"b","strategy":"sliding_log","limit":4096,"window":"1h"},{"name":"c","strategy":"sliding_log","limit":4096,"window":"1d"}]}`
	r := e.post(t, "check", three)
	require.Equal(t, 400, r.code)
	require.Contains(t, r.errorJSON(t).Error, "want 1 to 2 (max_inline_limits)")
}

// Issue 9.4: requests beyond MaxInFlight are answered 503 at once, with
// Retry-After, never forwarded, and counted.
func TestMaxInFlight(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 8)
	var hits sync.WaitGroup
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
	}))
	t.Cleanup(up.Close)
	e := newEnv(t, "upstream: "+up.URL+"\nrules: [{name: r, endpoint: /, key_by: global, strategy: fixed, limit: 100, window: 1m, fail_open: true}]",
		func(o *Options) { o.MaxInFlight = 2 })
	for range 2 {
		hits.Go(func() { e.do(t, "GET", "/slow", "") })
	}
	<-arrived
	<-arrived
	r := e.do(t, "GET", "/third", "")
	require.Equal(t, 503, r.code)
	require.Equal(t, "1", r.h.Get("Retry-After"))
	close(release)
	hits.Wait()
	require.Equal(t, 200, e.do(t, "GET", "/after", "").code)
	m := doURL(t, "GET", e.srv.URL+"/metrics", "")
	require.Contains(t, string(m.body), `rl_overload_rejected_total{reason="in_flight"} 1`)
}

// Issue 9.9: configuration mistakes that were accepted silently.
func TestConfigMistakes(t *testing.T) {
	rule := `{"name": "r", "strategy": "fixed", "limit": 1, "window": "1s"}`
	for _, c := range []struct{ format, doc, want string }{
		{"yaml", "rules: []", "rules: empty"},
		{"json", "[]", "rules: empty"},
		{"json", `{"rules": [` + rule + `], "rules": []}`, `key "rules" given twice`},
		{"json", `{"rules": [{"name": "a", "name": "b", "strategy": "fixed", "limit": 1, "window": "1s"}]}`, `key "name" given twice`},
		{"json", `{"rules": [{"name": "a", "limits": [{"strategy": "fixed", "limit": 1, "limit": 100, "window": "1s"}]}]}`, `key "limit" given twice`},
		{"yaml", "rules:\n  - {name: a, name: b, strategy: fixed, limit: 1, window: 1s}", `mapping key "name" already defined`},
		{"yaml", "rules: [" + rule + "]\nrules: [" + rule + "]", `mapping key "rules" already defined`},
		{"yaml", `rules: [{name: r, host: "*", strategy: fixed, limit: 1, window: 1s}]`, `host: "*": want a host name`},
		{"yaml", `rules: [{name: r, host: "https://api.example.com", strategy: fixed, limit: 1, window: 1s}]`, `host: "https://api.example.com"`},
		{"yaml", `rules: [{name: r, host: "*.*.example.com", strategy: fixed, limit: 1, window: 1s}]`, `host: "*.*.example.com"`},
		{"yaml", `rules: [{name: r, endpoint: /a/../admin, strategy: fixed, limit: 1, window: 1s}]`, `endpoint: "/a/../admin" is not in canonical form`},
		{"yaml", `rules: [{name: r, endpoint: "/admin/..", strategy: fixed, limit: 1, window: 1s}]`, `is not in canonical form`},
		{"yaml", `rules: [{name: r, endpoint: "//admin", strategy: fixed, limit: 1, window: 1s}]`, `is not in canonical form`},
		{"yaml", `rules: [{name: r, endpoint: "/admin;x", strategy: fixed, limit: 1, window: 1s}]`, `is not in canonical form`},
		{"yaml", `rules: [{name: r, endpoint: "/%2e%2e/admin", strategy: fixed, limit: 1, window: 1s}]`, `endpoint: "/%2e%2e/admin"`},
		{"yaml", `rules: [{name: r, endpoint: /x, strategy: token, limit: 1, window: 1s, shape: true}]`, `shape: only a leaky bucket`},
		{"yaml", `rules: [{name: r, strategy: leaky, limit: 1, window: 1s, shape: true}]`, `shape: shaping holds proxied requests`},
	} {
		_, err := ParseConfig("c."+c.format, c.format, []byte(c.doc))
		require.ErrorContains(t, err, c.want, c.doc)
	}
	// What stays valid.
	for _, doc := range []string{
		`rules: [{name: r, host: "*.example.com", endpoint: /v1/, strategy: leaky, limit: 1, window: 1s, shape: true}]`,
		`rules: [{name: r, host: "10.0.0.1", strategy: fixed, limit: 1, window: 1s}]`,
	} {
		_, err := ParseConfig("c.yaml", "yaml", []byte(doc))
		require.NoError(t, err, doc)
	}
}

// Issue 9.6: junk inline keys fill the memory store's byte budget; then a
// new key is answered by its rule's fail policy and the store stops
// growing, while keys it already holds keep being decided.
func TestFullStoreKeepsExistingKeys(t *testing.T) {
	var mem *memstore.Store
	e := newEnv(t, `
max_inline_limits: 16
rules:
  - {name: closed, strategy: fixed, limit: 3, window: 1h}
  - {name: open, strategy: fixed, limit: 3, window: 1h, fail_open: true}
`, func(o *Options) {
		mem = memstore.New(&memstore.Config{MaxBytes: 1 << 20, SweepInterval: -1, Clock: o.Clock})
		o.Store = mem
	})
	t.Cleanup(func() { mem.Close() })
	require.Equal(t, 200, e.post(t, "check", `{"rule":"closed","key":"old"}`).code)

	var ls []string
	for i := range 16 {
		ls = append(ls, fmt.Sprintf(`{"name":"l%d","strategy":"sliding_log","limit":4096,"window":"1h"}`, i))
	}
	junk := func(i int) string {
		return fmt.Sprintf(`{"key":"junk%d","limits":[%s]}`, i, strings.Join(ls, ","))
	}
	full := -1
	for i := range 100 {
		if r := e.post(t, "check", junk(i)); r.code != 200 {
			require.Equal(t, 503, r.code, "%s", r.body)
			full = i
			break
		}
	}
	require.Positive(t, full, "the budget filled")
	used := mem.Bytes()
	require.LessOrEqual(t, used, int64(1<<20))
	for i := range 20 {
		require.Equal(t, 503, e.post(t, "check", junk(1000+i)).code)
	}
	require.Equal(t, used, mem.Bytes(), "a full store does not grow")
	// Fill what is left with small junk keys too.
	for i := 0; ; i++ {
		require.Less(t, i, 100_000)
		if e.post(t, "check", fmt.Sprintf(`{"key":"small%d","limits":[{"strategy":"fixed","limit":1,"window":"1h"}]}`, i)).code != 200 {
			break
		}
	}

	// A new key is refused as load (issue 19, 6), fail_open or not: a
	// full store is a flood of keys, not an outage.
	require.Equal(t, 503, e.post(t, "check", `{"rule":"closed","key":"new"}`).code)
	r := e.post(t, "check", `{"rule":"open","key":"new"}`)
	require.Equal(t, 503, r.code, "%s", r.body)
	require.Equal(t, "overloaded", r.errorJSON(t).Code)
	require.Equal(t, "1", r.h.Get("Retry-After"))
	// The key held before is still decided exactly.
	require.Equal(t, 200, e.post(t, "check", `{"rule":"closed","key":"old"}`).code)
	require.Equal(t, 200, e.post(t, "check", `{"rule":"closed","key":"old"}`).code)
	require.Equal(t, 429, e.post(t, "check", `{"rule":"closed","key":"old"}`).code)
}

// Issue 10 (new-user wrongs): an over-large cost is invalid_cost, and API
// errors speak JSON, not Go.
func TestAPIErrorsSpeakJSON(t *testing.T) {
	e := newEnv(t, `rules: [{name: r, strategy: fixed, limit: 1, window: 1m}]`, nil)
	for _, c := range []struct{ body, code, want string }{
		{`{"rule":"r","key":"k","cost":1e30}`, "invalid_cost", "cost: want an integer between 0 and"},
		{`{"rule":"r","key":"k","cost":99999999999999999999}`, "invalid_cost", "cost: want an integer"},
		{`{"rule":"r","key":"k","cost":1.5}`, "invalid_cost", "cost: want an integer"},
		{`{"rule":"r","key":"k","cost":"3"}`, "invalid_cost", "got a string"},
		{`{"rule":5,"key":"k"}`, "invalid_json", `field "rule": want a string, got a number`},
		{`{"rule":"r","key":"k","fail_open":"yes"}`, "invalid_json", `want true or false`},
		{`{"key":"k","limits":{}}`, "invalid_json", `want a list`},
	} {
		r := e.post(t, "check", c.body)
		require.Equal(t, 400, r.code, c.body)
		ej := r.errorJSON(t)
		require.Equal(t, c.code, ej.Code, c.body)
		require.Contains(t, ej.Error, c.want, c.body)
		for _, goName := range []string{"int64", "map[", "interface", "[]map", "*bool"} {
			require.NotContains(t, ej.Error, goName, c.body)
		}
	}
}

// The proxy's 400 for a bad key says why, without echoing the key.
func TestProxyBadKeySaysWhy(t *testing.T) {
	up := newUpstream(t)
	e := newEnv(t, "upstream: "+up.srv.URL+"\nrules: [{name: r, endpoint: /, key_by: \"header:X-User\", strategy: fixed, limit: 5, window: 1m}]", nil)
	r := e.do(t, "GET", "/x", "", "X-User", strings.Repeat("u", 300))
	require.Equal(t, 400, r.code)
	require.Contains(t, string(r.body), "Invalid rate-limit key (header:X-User): ")
	require.Contains(t, string(r.body), "longer than")
	require.NotContains(t, string(r.body), strings.Repeat("u", 50))
}

// The proxy and the decision API share one outage detector: timeouts
// through either count toward the same outage (outage.Detector's rule),
// and a decision either completes ends the run.
func TestOutageSharedByProxyAndAPI(t *testing.T) {
	up := newUpstream(t)
	st := fakestore.New(t, fakestore.Config{})
	e := newEnv(t, "upstream: "+up.srv.URL+"\nrules: [{name: r, endpoint: /r, strategy: fixed, limit: 100, window: 1m, fail_open: true}]",
		func(o *Options) { o.Store = st })
	timeout := fmt.Errorf("query: %w: %w", store.ErrUnavailable, context.DeadlineExceeded)
	proxy := func() int { return e.do(t, "GET", "/r", "").code }
	api := func() string { return tryCheck(e.srv.URL, `{"rule":"r","key":"k"}`) }

	require.Equal(t, 200, proxy(), "decided") // a success first: tokens past the zero generation
	st.Fail(timeout)
	require.Equal(t, 503, proxy(), "a first timeout is load")
	require.Equal(t, "503", api(), "a second timeout, through the API")
	require.Equal(t, 200, proxy(), "the third, through the proxy: an outage, fail_open")
	require.Equal(t, "200 fail_open", api())
	st.Fail(nil)
	require.Equal(t, "200", api(), "decided: the run ends")
	st.Fail(timeout)
	require.Equal(t, 503, proxy(), "a first timeout again")
	require.Equal(t, "503", api())
	require.Equal(t, "200 fail_open", api())
}

package service

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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

// costUpstream answers as an upstream reporting each request's actual
// cost does: the value of the request's X-Reply-Cost in X-Cost-Actual, as
// a header field, or as a trailer when X-Reply-As is "trailer" (after a
// streamed body), or nowhere when X-Reply-Cost is absent.
func costUpstream(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		v, given := r.Header["X-Reply-Cost"]
		trailer := r.Header.Get("X-Reply-As") == "trailer"
		if given && trailer {
			w.Header().Set("Trailer", "X-Cost-Actual")
		} else if given {
			w.Header().Set("X-Cost-Actual", v[0])
		}
		w.Write([]byte("first part, "))
		http.NewResponseController(w).Flush()
		w.Write([]byte("the rest"))
		if given && trailer {
			w.Header().Set("X-Cost-Actual", v[0])
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// metric is the value of the series (name and labels as exported) on
// /metrics, 0 if absent.
func (e *env) metric(t *testing.T, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(string(e.do(t, "GET", "/metrics", "").body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			n, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return n
		}
	}
	return 0
}

// waitMetric waits until the series reaches want: the proxy settles after
// the response, in a goroutine of its own.
func (e *env) waitMetric(t *testing.T, series string, want float64) {
	t.Helper()
	await.Until(t, fmt.Sprintf("%s to reach %v", series, want), func() bool { return e.metric(t, series) == want })
}

// TestProxyResponseCost (issue 22, item 3): a rule's response_cost_header
// settles the actual cost the upstream reports, in a header or a trailer,
// against the cost taken: a debt denies the key's next request for
// exactly as long as it takes to pay off, a refund gives units back, an
// actual cost below min_cost settles as min_cost; a response without the
// field, or with an invalid one, settles nothing. The client never sees
// the field. Each settle is counted in rl_settles_total.
func TestProxyResponseCost(t *testing.T) {
	up := costUpstream(t)
	// A token bucket of 3, one token back a second.
	e := newEnv(t, `
upstream: `+up.URL+`
rules:
  - {name: llm, endpoint: /v1/chat, key_by: "header:X-User", strategy: token, limit: 3, window: 1s, rate: 1,
     cost_header: X-Cost, response_cost_header: X-Cost-Actual}
`, nil)
	const settled, invalid = `rl_settles_total{result="settled",rule="llm"}`, `rl_settles_total{result="invalid",rule="llm"}`
	require.Zero(t, e.metric(t, settled))
	require.Contains(t, string(e.do(t, "GET", "/metrics", "").body), settled+" 0", "exported from the start")
	send := func(user string, hdr ...string) reply {
		t.Helper()
		return e.do(t, "POST", "/v1/chat", "", append([]string{"X-User", user}, hdr...)...)
	}
	peek := func(user string) DecisionJSON {
		t.Helper()
		return e.post(t, "peek", `{"rule":"llm","key":"`+user+`","cost":0}`).decision(t)
	}
	n := 0.0
	for _, as := range []string{"header", "trailer"} {
		t.Run(as, func(t *testing.T) {
			debtor := "debtor-" + as
			// Estimate 1, actual 6: 6 used of 3, a debt of 3.
			r := send(debtor, "X-Reply-Cost", "6", "X-Reply-As", as)
			require.Equal(t, 200, r.code)
			require.Equal(t, "first part, the rest", string(r.body))
			require.Empty(t, r.h.Values("X-Cost-Actual"), "the field is the upstream's message to the proxy")
			require.Equal(t, `"default";r=2;t=1`, r.h.Get("RateLimit"), "the fields describe the decision on the estimate")
			n++
			e.waitMetric(t, settled, n)
			r = send(debtor)
			require.Equal(t, 429, r.code)
			require.Equal(t, "4", r.h.Get("Retry-After"), "the debt is paid off at the rate: 6 - 2 = 4 tokens, 4 s")
			e.now.Add(4_000_000 - 1)
			require.Equal(t, 429, send(debtor).code, "1 µs early")
			e.now.Add(1)
			require.Equal(t, 200, send(debtor).code, "at Retry-After")

			// Estimate 3, actual 1: a refund of 2.
			refunded := "refunded-" + as
			require.Equal(t, 200, send(refunded, "X-Cost", "3", "X-Reply-Cost", "1", "X-Reply-As", as).code)
			n++
			e.waitMetric(t, settled, n)
			require.Equal(t, int64(2), peek(refunded).Remaining)

			// Actual 0: settled as min_cost, 1.
			free := "free-" + as
			require.Equal(t, 200, send(free, "X-Cost", "3", "X-Reply-Cost", "0", "X-Reply-As", as).code)
			n++
			e.waitMetric(t, settled, n)
			require.Equal(t, int64(2), peek(free).Remaining, "a request is never free")
		})
	}

	// No field: the estimate stands, nothing counted.
	require.Equal(t, 200, send("quiet", "X-Cost", "2").code)
	require.Equal(t, int64(1), peek("quiet").Remaining)
	// Invalid fields: nothing settled, counted.
	for i, v := range []string{"-1", "1.5", "lots", "1e3"} {
		user := fmt.Sprintf("bad%d", i)
		r := send(user, "X-Reply-Cost", v)
		require.Equal(t, 200, r.code, "the response is served all the same")
		require.Empty(t, r.h.Values("X-Cost-Actual"))
		e.waitMetric(t, invalid, float64(i+1))
		require.Equal(t, int64(2), peek(user).Remaining, "the estimate stands")
	}
	require.Equal(t, n, e.metric(t, settled))

	// The rule's canonical form names the field.
	rules := string(e.do(t, "GET", APIPrefix+"rules", "").body)
	require.Contains(t, rules, `"response_cost_header":"X-Cost-Actual"`)
}

// TestAPISettle (issue 22, item 3): POST /v1/ratelimit/settle corrects a
// key's usage by the estimate its check took and the call's actual cost,
// on a rule (its override for the key) or inline limits, by
// pipeline.SettleDelta as every front end settles: actual at least the
// rule's min_cost, at most MaxCost. It never denies: a debt denies the
// next check for exactly as long as it takes to pay off; a refund gives
// units back. Its mistakes are 4xx naming the field, with the check's
// codes; "delta", which could not be held to min_cost, is refused naming
// estimate and actual.
func TestAPISettle(t *testing.T) {
	e := newEnv(t, `rules:
  - {name: r, strategy: gcra, limit: 2, window: 1s, rate: 1, overrides: [{key: vip, strategy: gcra, limit: 4, window: 1s, rate: 1}]}
  - {name: m, strategy: fixed, limit: 10, window: 1h, cost: 4, min_cost: 2}
`, nil)
	// A check takes the estimate, 1; the call cost 5: a debt of 4.
	require.Equal(t, 200, e.post(t, "check", `{"rule":"r","key":"k"}`).code)
	r := e.post(t, "settle", `{"rule":"r","key":"k","estimate":1,"actual":5}`)
	require.Equal(t, 200, r.code, string(r.body))
	d := r.decision(t)
	require.True(t, d.Allowed, "a settle never denies")
	require.False(t, d.Taken)
	require.Equal(t, int64(0), d.Cost)
	require.Equal(t, int64(4), *d.Delta)
	require.Equal(t, int64(0), d.Remaining)
	require.Contains(t, string(r.body), `"cost":0,"delta":4,`)
	require.Empty(t, r.h.Get("Retry-After"))
	require.Equal(t, `"default";q=2;w=1`, r.h.Get("RateLimit-Policy"))
	// 5 used of a burst of 2, one back a second: the next passes at 4 s.
	c := e.post(t, "check", `{"rule":"r","key":"k"}`)
	require.Equal(t, 429, c.code)
	require.Equal(t, int64(4000), c.decision(t).RetryAfterMS)
	e.now.Add(4_000_000)
	require.Equal(t, 200, e.post(t, "check", `{"rule":"r","key":"k"}`).code)

	// A refund, under the key's override.
	require.Equal(t, 200, e.post(t, "check", `{"rule":"r","key":"vip","cost":4}`).code)
	r = e.post(t, "settle", `{"rule":"r","key":"vip","estimate":4,"actual":1}`)
	require.Equal(t, 200, r.code, string(r.body))
	d = r.decision(t)
	require.Equal(t, "key:vip", d.Override)
	require.Equal(t, int64(-3), *d.Delta)
	require.Equal(t, int64(3), d.Remaining)
	require.Equal(t, 2.0, e.metric(t, `rl_settles_total{result="settled",rule="r"}`))

	// min_cost 2: an actual 0 is settled as 2, a refund of at most 4 - 2.
	require.Equal(t, 200, e.post(t, "check", `{"rule":"m","key":"z"}`).code)
	r = e.post(t, "settle", `{"rule":"m","key":"z","estimate":4,"actual":0}`)
	require.Equal(t, 200, r.code, string(r.body))
	require.Equal(t, int64(-2), *r.decision(t).Delta)
	require.Equal(t, int64(8), r.decision(t).Remaining, "a request is never free")
	// Above MaxCost: a debt of MaxCost, never refused (nor free); a
	// number of any length is a cost.
	for i, actual := range []string{"1099511627777", "99999999999999999999999"} {
		key := fmt.Sprintf("huge%d", i)
		require.Equal(t, 200, e.post(t, "check", `{"rule":"m","key":"`+key+`"}`).code)
		r = e.post(t, "settle", `{"rule":"m","key":"`+key+`","estimate":4,"actual":`+actual+`}`)
		require.Equal(t, 200, r.code, string(r.body))
		require.Equal(t, core.MaxCost-4, *r.decision(t).Delta, actual)
		require.Equal(t, 429, e.post(t, "check", `{"rule":"m","key":"`+key+`","cost":2}`).code, actual)
	}

	// Inline limits, as check takes them.
	r = e.post(t, "settle", `{"key":"i","estimate":1,"actual":8,"limits":[{"name":"m","strategy":"fixed","limit":5,"window":"1m"}]}`)
	require.Equal(t, 200, r.code, string(r.body))
	require.Equal(t, "inline", r.decision(t).Rule)
	c = e.post(t, "check", `{"key":"i","limits":[{"name":"m","strategy":"fixed","limit":5,"window":"1m"}]}`)
	require.Equal(t, 429, c.code, "7 used of 5: denied until the window ends")
	require.Equal(t, int64(46), c.decision(t).RetryAfter, "14 s into the minute")
	require.Equal(t, 1.0, e.metric(t, `rl_settles_total{result="settled",rule="inline"}`))

	for _, c := range []struct{ body, code, msg string }{
		{`{"rule":"r","key":"k"}`, "invalid_cost", "estimate: missing"},
		{`{"rule":"r","key":"k","estimate":1}`, "invalid_cost", "actual: missing"},
		{`{"rule":"r","key":"k","actual":1}`, "invalid_cost", "estimate: missing"},
		{`{"rule":"r","key":"k","estimate":1,"actual":1,"cost":1}`, "invalid_cost", "cost: a settle has no cost"},
		{`{"rule":"r","key":"k","delta":4}`, "invalid_cost", "delta: no longer accepted: give a settle estimate, the cost the check took, and actual"},
		{`{"rule":"r","key":"k","estimate":1,"actual":2,"delta":1}`, "invalid_cost", "delta: no longer accepted"},
		{`{"rule":"r","key":"k","delta":1.5}`, "invalid_cost", "delta: no longer accepted"},
		{`{"rule":"m","key":"k","estimate":1,"actual":1}`, "invalid_cost", "estimate: 1 is outside [2, 1099511627776]"},
		{`{"rule":"r","key":"k","estimate":1099511627777,"actual":1}`, "invalid_cost", "estimate: 1099511627777 is outside [1, 1099511627776]"},
		{`{"rule":"r","key":"k","estimate":1.5,"actual":1}`, "invalid_cost", "estimate: want an integer"},
		{`{"rule":"r","key":"k","estimate":1,"actual":-1}`, "invalid_cost", "actual: want an integer, at least 0, got -1"},
		{`{"rule":"r","key":"k","estimate":1,"actual":1.5}`, "invalid_cost", "actual: want an integer, at least 0"},
		{`{"rule":"r","key":"k","estimate":1,"actual":1e3}`, "invalid_cost", "actual: want an integer, at least 0"},
		{`{"rule":"r","key":"k","estimate":1,"actual":"1"}`, "invalid_cost", "actual: want an integer, at least 0"},
		{`{"rule":"nope","key":"k","estimate":1,"actual":1}`, "unknown_rule", `no rule named "nope"`},
		{`{"rule":"r","estimate":1,"actual":1}`, "invalid_key", "key: missing"},
		{`{"rule":"r","key":"k","estimate":1,"actual":1,"extra":1}`, "unknown_field", `unknown field "extra" (want rule, limits, key, cost, estimate, actual, uncharged, fail_open, explain)`},
	} {
		r := e.post(t, "settle", c.body)
		require.Equal(t, c.code, r.errorJSON(t).Code, c.body)
		require.Contains(t, r.errorJSON(t).Error, c.msg, c.body)
	}
	for _, body := range []string{`{"rule":"r","key":"k","delta":1}`, `{"rule":"r","key":"k","estimate":1}`, `{"rule":"r","key":"k","actual":1}`} {
		r = e.post(t, "check", body)
		require.Equal(t, "invalid_cost", r.errorJSON(t).Code, body)
	}
	require.Contains(t, e.post(t, "check", `{"rule":"r","key":"k","actual":1}`).errorJSON(t).Error, "estimate, actual: only a settle has them")
	r = e.do(t, "GET", APIPrefix+"settle", "")
	require.Equal(t, 405, r.code)
	require.Equal(t, "POST", r.h.Get("Allow"))
}

// TestAPISettleRefundScope: a refund gives units back, so a check token,
// which may settle debts (actual at least the estimate, after min_cost),
// may not settle one. Before, a check token's settle took any delta:
// {"delta": -2^40} restored an exhausted victim's quota (a reset by another
// name, which the same token was refused), and check cost 1 then settle -1
// made a request free.
func TestAPISettleRefundScope(t *testing.T) {
	up := newUpstream(t)
	e := newEnv(t, tokenConfig(up.srv.URL), nil)
	srv := httptest.NewServer(e.svc.Handler())
	t.Cleanup(srv.Close)
	api := srv.URL + APIPrefix
	as := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	remaining := func(key string) int64 {
		t.Helper()
		r := doURL(t, "POST", api+"peek", `{"rule":"r","key":"`+key+`","cost":0}`, as(tokAdmin)...)
		require.Equal(t, 200, r.code, "%s", r.body)
		return r.decision(t).Remaining
	}
	for range 5 {
		require.Equal(t, 200, doURL(t, "POST", api+"check", `{"rule":"r","key":"victim"}`, as(tokCheck)...).code)
	}
	require.Equal(t, 403, doURL(t, "POST", api+"reset", `{"rule":"r","key":"victim"}`, as(tokCheck)...).code)

	// The reviewer's attack: a check token's huge negative delta.
	r := doURL(t, "POST", api+"settle", `{"rule":"r","key":"victim","delta":-1099511627776}`, as(tokCheck)...)
	require.Equal(t, 400, r.code, "%s", r.body)
	require.Contains(t, r.errorJSON(t).Error, "estimate")
	require.Equal(t, int64(0), remaining("victim"), "a check token restored the victim's quota")
	// The same refund as estimate and actual.
	for _, body := range []string{
		`{"rule":"r","key":"victim","estimate":1099511627776,"actual":0}`,
		`{"rule":"r","key":"victim","estimate":5,"actual":1}`,
	} {
		r = doURL(t, "POST", api+"settle", body, as(tokCheck)...)
		require.Equal(t, 403, r.code, "%s", r.body)
		require.Equal(t, "forbidden", r.errorJSON(t).Code)
		require.Contains(t, r.errorJSON(t).Error, "needs a settle or admin token (this token's role is check")
	}
	require.Equal(t, int64(0), remaining("victim"), "a check token restored the victim's quota")
	require.Equal(t, 429, doURL(t, "POST", api+"check", `{"rule":"r","key":"victim"}`, as(tokCheck)...).code)

	// Check 1, then "actual 0": settled as min_cost 1, no refund, so a
	// check token may send it, and the request still costs 1.
	require.Equal(t, 200, doURL(t, "POST", api+"check", `{"rule":"r","key":"free"}`, as(tokCheck)...).code)
	r = doURL(t, "POST", api+"settle", `{"rule":"r","key":"free","estimate":1,"actual":0}`, as(tokCheck)...)
	require.Equal(t, 200, r.code, "%s", r.body)
	require.Equal(t, int64(0), *r.decision(t).Delta)
	require.Equal(t, int64(4), remaining("free"), "a request was free")

	// A check token settles debts.
	require.Equal(t, 200, doURL(t, "POST", api+"check", `{"rule":"r","key":"debtor"}`, as(tokCheck)...).code)
	r = doURL(t, "POST", api+"settle", `{"rule":"r","key":"debtor","estimate":1,"actual":4}`, as(tokCheck)...)
	require.Equal(t, 200, r.code, "%s", r.body)
	require.Equal(t, int64(1), remaining("debtor"))

	// An admin settles refunds, never below min_cost.
	require.Equal(t, 200, doURL(t, "POST", api+"check", `{"rule":"r","key":"refunded","cost":4}`, as(tokAdmin)...).code)
	r = doURL(t, "POST", api+"settle", `{"rule":"r","key":"refunded","estimate":4,"actual":0}`, as(tokAdmin)...)
	require.Equal(t, 200, r.code, "%s", r.body)
	require.Equal(t, int64(-3), *r.decision(t).Delta)
	require.Equal(t, int64(4), remaining("refunded"))
}

// TestSettleRole: a token of role settle may do what a check token may and
// settle refunds, never below min_cost; it is no admin (no reset, inline
// limits or /rules).
func TestSettleRole(t *testing.T) {
	const tokSettle = "settle-token-0123456789abcdef"
	up := newUpstream(t)
	e := newEnv(t, `
upstream: `+up.srv.URL+`
api_tokens:
  - {name: ops, role: admin, sha256: `+tokenHash(tokAdmin)+`}
  - {name: gateway, role: settle, sha256: `+tokenHash(tokSettle)+`}
rules:
  - {name: r, endpoint: /r, strategy: fixed, limit: 5, window: 1m}
`, nil)
	srv := httptest.NewServer(e.svc.Handler())
	t.Cleanup(srv.Close)
	api := srv.URL + APIPrefix
	settler := []string{"Authorization", "Bearer " + tokSettle}
	require.Equal(t, 200, doURL(t, "POST", api+"check", `{"rule":"r","key":"k","cost":4}`, settler...).code)
	r := doURL(t, "POST", api+"settle", `{"rule":"r","key":"k","estimate":4,"actual":0}`, settler...)
	require.Equal(t, 200, r.code, "%s", r.body)
	require.Equal(t, int64(-3), *r.decision(t).Delta)
	require.Equal(t, int64(4), r.decision(t).Remaining)
	require.Equal(t, 403, doURL(t, "POST", api+"reset", `{"rule":"r","key":"k"}`, settler...).code)
	r = doURL(t, "POST", api+"settle", `{"limits":[{"strategy":"fixed","limit":1,"window":"1m"}],"key":"k","estimate":1,"actual":1}`, settler...)
	require.Equal(t, 403, r.code, "%s", r.body)
	require.Equal(t, 403, doURL(t, "GET", api+"rules", "", settler...).code)
}

// TestSettleNotRefusedByKeyBound: a settle is never refused by the per-key
// in-flight bound (MaxInFlightPerKey): refused, it would leave the
// estimate, and load on a key (its own other requests) would turn its debt
// into admissions. It runs past the bound, counted in it. Before, with a
// bound of 1 and a take of the key held in the store, the proxy's settle
// of an actual 100 (limit 10) and the decision API's failed (503) and the
// estimate stood.
func TestSettleNotRefusedByKeyBound(t *testing.T) {
	// The first take after hold is set waits in the store until released:
	// a decision in flight on its key.
	var hold atomic.Bool
	var hs *fakestore.Hold
	var e *env
	taken := make(chan reply, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Step") == "big" {
			hold.Store(true)
			go func() { taken <- e.do(t, "GET", "/llm", "", "X-User", "mallory") }() // its take waits in the store
			<-hs.Arrived()
			w.Header().Set("X-Cost-Actual", "100")
		}
	}))
	t.Cleanup(up.Close)
	e = newEnv(t, `
upstream: `+up.URL+`
rules:
  - {name: llm, endpoint: /llm, key_by: "header:X-User", strategy: fixed, limit: 10, window: 1h, response_cost_header: X-Cost-Actual}
`, func(o *Options) {
		fs := fakestore.New(t, fakestore.Config{Inner: o.Store})
		hs = fs.HoldOnce(func(r store.Request) bool { return r.Op == store.Take && hold.Load() })
		o.Store = fs
		o.MaxInFlightPerKey = 1
	})
	release := hs.Release
	t.Cleanup(release) // before the server's Close, which waits for the held request
	const settled, failed = `rl_settles_total{result="settled",rule="llm"}`, `rl_settles_total{result="failed",rule="llm"}`
	r := e.do(t, "GET", "/llm", "", "X-User", "mallory", "X-Step", "big")
	require.Equal(t, 200, r.code)
	e.waitMetric(t, settled, 1) // while the other take holds the key's one place
	require.Zero(t, e.metric(t, failed))
	// The decision API's settle too.
	r = e.post(t, "settle", `{"rule":"llm","key":"mallory","estimate":1,"actual":5}`)
	require.Equal(t, 200, r.code, "%s", r.body)
	require.Equal(t, 2.0, e.metric(t, settled))
	// A take of the key is still refused at the bound: load, never admitted.
	r = e.post(t, "check", `{"rule":"llm","key":"mallory"}`)
	require.Equal(t, 503, r.code, "%s", r.body)
	release()
	require.Equal(t, 429, (<-taken).code, "the held take was decided after the debt")
	d := e.post(t, "peek", `{"rule":"llm","key":"mallory","cost":1}`).decision(t)
	require.False(t, d.Allowed, "in debt: 104 used of 10")
}

// TestProxyDropsTheResponseCostField: a client's own request field named
// like the rule's response_cost_header, in any case and spelling of '-'
// and '_', never reaches the upstream (pipeline.DropsField). Before, an
// upstream echoing its request's X-* fields (or reading X_Cost_Actual as
// HTTP_X_COST_ACTUAL) reported the client's "X-Cost-Actual: 1" as the
// actual cost: a refund to 1 of an estimate of 3, every request.
func TestProxyDropsTheResponseCostField(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for name, vs := range r.Header {
			if strings.EqualFold(strings.ReplaceAll(name, "_", "-"), "X-Cost-Actual") {
				mu.Lock()
				seen = append(seen, name)
				mu.Unlock()
				for _, v := range vs { // an upstream echoing X-* request fields
					w.Header().Add("X-Cost-Actual", v)
				}
			}
		}
	}))
	t.Cleanup(up.Close)
	e := newEnv(t, `
upstream: `+up.URL+`
rules:
  - {name: llm, endpoint: /v1/chat, key_by: "header:X-User", strategy: fixed, limit: 6, window: 1h, cost: 3, response_cost_header: X-Cost-Actual}
`, nil)
	for _, f := range []string{"X-Cost-Actual", "x-cost-actual", "X_Cost_Actual", "x-cost_actual"} {
		user := "u-" + f
		require.Equal(t, 200, e.do(t, "POST", "/v1/chat", "", "X-User", user, f, "1").code, f)
		require.Equal(t, 200, e.do(t, "POST", "/v1/chat", "", "X-User", user, f, "1").code, f)
		require.Equal(t, 429, e.do(t, "POST", "/v1/chat", "", "X-User", user, f, "1").code, "%s: 6 used of 6", f)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, seen, "the upstream got the client's field")
	require.Zero(t, e.metric(t, `rl_settles_total{result="settled",rule="llm"}`))
}

// TestProxyHugeResponseCost: an actual cost above MaxCost (2^40), or too
// long for an int64, is settled as MaxCost (pipeline.SettleDelta): never
// refused, which would leave the estimate and make the largest costs the
// cheapest. Before, both were "invalid" and the estimate stood.
func TestProxyHugeResponseCost(t *testing.T) {
	up := costUpstream(t)
	e := newEnv(t, `
upstream: `+up.URL+`
rules:
  - {name: dl, endpoint: /dl, key_by: "header:X-User", strategy: fixed, limit: 100000000, window: 1h, cost: 1000, response_cost_header: X-Cost-Actual}
`, nil)
	const settled = `rl_settles_total{result="settled",rule="dl"}`
	for i, actual := range []string{"1099511627777", "99999999999999999999999"} {
		user := fmt.Sprintf("u%d", i)
		require.Equal(t, 200, e.do(t, "GET", "/dl", "", "X-User", user, "X-Reply-Cost", actual).code)
		e.waitMetric(t, settled, float64(i+1))
		d := e.post(t, "peek", `{"rule":"dl","key":"`+user+`","cost":1}`).decision(t)
		require.False(t, d.Allowed, "%s: settled as MaxCost, far above the limit", actual)
		require.Zero(t, e.metric(t, `rl_settles_total{result="invalid",rule="dl"}`))
	}
}

// TestAPISettleUncharged: a settle naming the shadow limits its check did
// not charge ("uncharged") leaves them as they are (rl.Policy.Charged):
// the candidate is not refunded units it never took; a name that is not a
// shadow limit of the rule is refused.
func TestAPISettleUncharged(t *testing.T) {
	e := newEnv(t, `rules:
  - name: r
    limits:
      - {name: default, strategy: fixed, limit: 1000, window: 1h}
      - {name: small, strategy: fixed, limit: 150, window: 1h, shadow: true}
`, nil)
	check := func(cost string) DecisionJSON {
		t.Helper()
		r := e.post(t, "check", `{"rule":"r","key":"k","cost":`+cost+`}`)
		require.Equal(t, 200, r.code, string(r.body))
		return r.decision(t)
	}
	settle := func(body string) {
		t.Helper()
		r := e.post(t, "settle", body)
		require.Equal(t, 200, r.code, string(r.body))
	}
	require.Empty(t, check("100").Uncharged)
	d := check("100") // small: 200 > 150, a would-deny
	require.False(t, d.Limits[1].Allowed)
	require.Equal(t, []string{"small"}, d.Uncharged, "the check names what its settle should leave out")
	settle(`{"rule":"r","key":"k","estimate":100,"actual":20,"uncharged":["small"]}`)
	d = check("60") // small: 100 + 60 > 150 (not refunded the 80 it never took)
	require.False(t, d.Limits[1].Allowed, "small refunded units it never took")
	require.Equal(t, int64(1000-180), d.Remaining, "enforced: 100 + 20 + 60")

	for _, c := range []struct{ body, msg string }{
		{`{"rule":"r","key":"k","estimate":1,"actual":1,"uncharged":["default"]}`, `is not a shadow limit of r`},
		{`{"rule":"r","key":"k","estimate":1,"actual":1,"uncharged":["nope"]}`, `is not a shadow limit of r`},
		{`{"rule":"r","key":"k","uncharged":["small"]}`, `only a settle has it`},
	} {
		op := "settle"
		if !strings.Contains(c.body, "estimate") {
			op = "check"
		}
		r := e.post(t, op, c.body)
		require.Equal(t, 400, r.code, c.body)
		require.Contains(t, string(r.body), c.msg, c.body)
	}
}

// TestAPISettleOutlivesTheCaller: a settle whose caller hung up once it
// was sent is still made (the store call is not cancelled with the
// request), so hanging up never keeps a debt from landing.
func TestAPISettleOutlivesTheCaller(t *testing.T) {
	e := newEnv(t, `rules:
  - {name: m, strategy: fixed, limit: 10, window: 1h}
`, func(o *Options) {
		// It fails a call whose context is done, as pgstore does.
		o.Store = fakestore.New(t, fakestore.Config{Inner: o.Store, FailDoneContext: true})
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequestWithContext(ctx, "POST", "/v1/ratelimit/settle", strings.NewReader(`{"rule":"m","key":"k","estimate":1,"actual":9}`))
	w := httptest.NewRecorder()
	testHandler(e.svc).ServeHTTP(w, req)
	require.Equal(t, 200, w.Code, w.Body.String())
	r := e.post(t, "check", `{"rule":"m","key":"k","cost":3}`)
	require.Equal(t, 429, r.code, "the debt of 8 landed: 8 of 10 used")
}

// TestAPISettleKeyInFlight: the decision API's settles have a per-key
// in-flight bound of their own (MaxInFlightPerKey): a flood of settles on
// one key takes at most the bound's store calls, the rest answered 503
// with Retry-After as a check is under load, counted in
// rl_overload_rejected_total{reason="key_in_flight"} and as failed
// settles, while another key's settles go on. Before, 48 settles on one
// key on a bound of 2 all went to the store: a decision-API settle follows
// no admission, so nothing else bounded them.
func TestAPISettleKeyInFlight(t *testing.T) {
	const bound, flood = 2, 48
	var hs *fakestore.Hold // every settle, until released
	e := newEnv(t, `
rules:
  - {name: llm, endpoint: /llm, key_by: "header:X-User", strategy: fixed, limit: 1000, window: 1h}
`, func(o *Options) {
		fs := fakestore.New(t, fakestore.Config{Inner: o.Store})
		hs = fs.Hold(fakestore.Ops(store.Settle))
		o.Store = fs
		o.MaxInFlightPerKey = bound
	})
	release := hs.Release
	t.Cleanup(release) // before the server's Close, which waits for the held settles
	const settle = `{"rule":"llm","key":"hot","estimate":1,"actual":2}`
	replies := make(chan reply, flood)
	var wg sync.WaitGroup
	for range flood {
		wg.Go(func() { replies <- e.post(t, "settle", settle) })
	}
	for range bound {
		<-hs.Arrived() // the bound's settles hold their places in the store
	}
	for range flood - bound { // the rest are answered at once
		var r reply
		select {
		case r = <-replies:
		case <-hs.Arrived():
			t.Fatal("a settle past the bound reached the store")
		case <-time.After(30 * time.Second):
			t.Fatal("the settles past the bound were not answered")
		}
		require.Equal(t, 503, r.code, "%s", r.body)
		require.Equal(t, "1", r.h.Get("Retry-After"))
		require.Equal(t, "overloaded", r.errorJSON(t).Code)
	}
	select {
	case <-hs.Arrived():
		t.Fatal("a settle past the bound reached the store")
	default:
	}
	// The key's checks meet the bound too (the settles count among its
	// decisions); another key's settle goes on.
	require.Equal(t, 503, e.post(t, "check", `{"rule":"llm","key":"hot"}`).code)
	cold := make(chan reply, 1)
	go func() { cold <- e.post(t, "settle", `{"rule":"llm","key":"cold","estimate":1,"actual":2}`) }()
	<-hs.Arrived()
	release()
	require.Equal(t, 200, (<-cold).code)
	wg.Wait()
	close(replies)
	for r := range replies {
		require.Equal(t, 200, r.code, "%s", r.body)
	}
	require.Equal(t, 200, e.post(t, "settle", settle).code, "the key's places are given back")
	require.Equal(t, float64(flood-bound), e.metric(t, `rl_settles_total{result="failed",rule="llm"}`))
	require.Equal(t, float64(flood-bound+1), e.metric(t, `rl_overload_rejected_total{reason="key_in_flight"}`), "and the check")
	require.Equal(t, float64(bound+2), e.metric(t, `rl_settles_total{result="settled",rule="llm"}`))
	require.Zero(t, e.metric(t, `rl_store_errors_total{rule="llm"}`), "load, not the store's failure")
}

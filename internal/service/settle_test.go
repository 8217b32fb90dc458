package service

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
	deadline := time.Now().Add(10 * time.Second)
	for e.metric(t, series) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v, want %v", series, e.metric(t, series), want)
		}
		time.Sleep(time.Millisecond)
	}
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
	for i, v := range []string{"-1", "1.5", "lots", "1099511627777"} {
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
// key's usage by a delta, the actual cost of a call less the estimate its
// check took, on a rule (its override for the key) or inline limits. It
// never denies: a debt denies the next check for exactly as long as it
// takes to pay off; a refund gives units back. Its mistakes are 4xx
// naming the field, with the check's codes.
func TestAPISettle(t *testing.T) {
	e := newEnv(t, `rules:
  - {name: r, strategy: gcra, limit: 2, window: 1s, rate: 1, overrides: [{key: vip, strategy: gcra, limit: 4, window: 1s, rate: 1}]}
`, nil)
	// A check takes the estimate, 1; the call cost 5: settle 4.
	require.Equal(t, 200, e.post(t, "check", `{"rule":"r","key":"k"}`).code)
	r := e.post(t, "settle", `{"rule":"r","key":"k","delta":4}`)
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
	r = e.post(t, "settle", `{"rule":"r","key":"vip","delta":-3}`)
	require.Equal(t, 200, r.code, string(r.body))
	d = r.decision(t)
	require.Equal(t, "key:vip", d.Override)
	require.Equal(t, int64(3), d.Remaining)
	require.Equal(t, 2.0, e.metric(t, `rl_settles_total{result="settled",rule="r"}`))

	// Inline limits, as check takes them.
	r = e.post(t, "settle", `{"key":"i","delta":7,"limits":[{"name":"m","strategy":"fixed","limit":5,"window":"1m"}]}`)
	require.Equal(t, 200, r.code, string(r.body))
	require.Equal(t, "inline", r.decision(t).Rule)
	c = e.post(t, "check", `{"key":"i","limits":[{"name":"m","strategy":"fixed","limit":5,"window":"1m"}]}`)
	require.Equal(t, 429, c.code, "7 used of 5: denied until the window ends")
	require.Equal(t, int64(46), c.decision(t).RetryAfter, "14 s into the minute")
	require.Equal(t, 1.0, e.metric(t, `rl_settles_total{result="settled",rule="inline"}`))

	for _, c := range []struct{ body, code, msg string }{
		{`{"rule":"r","key":"k"}`, "invalid_cost", "delta: missing"},
		{`{"rule":"r","key":"k","delta":1,"cost":1}`, "invalid_cost", "cost: a settle has no cost"},
		{`{"rule":"r","key":"k","delta":1099511627777}`, "invalid_cost", "delta: 1099511627777 is outside [-1099511627776, 1099511627776]"},
		{`{"rule":"r","key":"k","delta":1.5}`, "invalid_cost", "delta: want an integer between -1099511627776 and 1099511627776"},
		{`{"rule":"r","key":"k","delta":"1"}`, "invalid_cost", "delta: want an integer"},
		{`{"rule":"nope","key":"k","delta":1}`, "unknown_rule", `no rule named "nope"`},
		{`{"rule":"r","delta":1}`, "invalid_key", "key: missing"},
		{`{"rule":"r","key":"k","delta":1,"extra":1}`, "unknown_field", `unknown field "extra" (want rule, limits, key, cost, delta, fail_open, explain)`},
	} {
		r := e.post(t, "settle", c.body)
		require.Equal(t, c.code, r.errorJSON(t).Code, c.body)
		require.Contains(t, r.errorJSON(t).Error, c.msg, c.body)
	}
	r = e.post(t, "check", `{"rule":"r","key":"k","delta":1}`)
	require.Equal(t, "invalid_cost", r.errorJSON(t).Code)
	require.Contains(t, r.errorJSON(t).Error, "delta: only a settle has a delta")
	r = e.do(t, "GET", APIPrefix+"settle", "")
	require.Equal(t, 405, r.code)
	require.Equal(t, "POST", r.h.Get("Allow"))
}

package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/pipeline"
	"github.com/rlcore/rl/internal/testkit/fakestore"
	"github.com/rlcore/rl/memstore"
	"github.com/rlcore/rl/store"
)

// t0 is 2026-01-01T00:00:00Z in µs; tests start 10 s into a minute.
const t0 = int64(1_767_225_600_000_000)

type env struct {
	svc *Service
	srv *httptest.Server
	now *atomic.Int64
	mem *memstore.Store
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newEnv serves yaml's rules over a memstore (or opts.Store) with a clock
// the test moves.
func newEnv(t *testing.T, yaml string, mod func(*Options)) *env {
	t.Helper()
	cfg, err := ParseConfig("test.yaml", "yaml", []byte(yaml))
	require.NoError(t, err)
	e := &env{now: &atomic.Int64{}}
	e.now.Store(t0 + 10_000_000)
	e.mem = memstore.New(&memstore.Config{Clock: e.now.Load, SweepInterval: -1})
	t.Cleanup(func() { e.mem.Close() })
	opts := Options{Store: e.mem, Clock: e.now.Load, Logger: quietLogger()}
	if mod != nil {
		mod(&opts)
	}
	e.svc, err = New(cfg, opts)
	require.NoError(t, err)
	e.srv = httptest.NewServer(testHandler(e.svc))
	t.Cleanup(e.srv.Close)
	return e
}

// burstNameOnly keeps only the name of the first limit in a decision, whose
// other fields (the non-denying limit's view) the test does not pin.
func burstNameOnly(t *testing.T, body []byte) string {
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m))
	ls := m["limits"].([]any)
	ls[0] = map[string]any{"name": ls[0].(map[string]any)["name"]}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return string(b)
}

type reply struct {
	code int
	h    http.Header
	body []byte
}

func (r reply) decision(t *testing.T) DecisionJSON {
	t.Helper()
	var d DecisionJSON
	require.NoError(t, json.Unmarshal(r.body, &d), string(r.body))
	return d
}

func (r reply) errorJSON(t *testing.T) ErrorJSON {
	t.Helper()
	var d ErrorJSON
	require.NoError(t, json.Unmarshal(r.body, &d), string(r.body))
	return d
}

func (e *env) do(t *testing.T, method, path, body string, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := e.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return reply{resp.StatusCode, resp.Header, b}
}

func (e *env) post(t *testing.T, op, body string) reply {
	t.Helper()
	return e.do(t, "POST", APIPrefix+op, body)
}

func TestCheckPeekReset(t *testing.T) {
	e := newEnv(t, `rules: [{name: r, strategy: fixed, limit: 2, window: 1m}]`, nil)
	r := e.post(t, "check", `{"rule":"r","key":"alice"}`)
	require.Equal(t, 200, r.code)
	d := r.decision(t)
	require.True(t, d.Allowed)
	require.True(t, d.Taken)
	require.Equal(t, int64(1), d.Remaining)
	require.Equal(t, `"default";q=2;w=60`, r.h.Get("RateLimit-Policy"))
	require.Equal(t, `"default";r=1;t=50`, r.h.Get("RateLimit"))
	require.Equal(t, "50", r.h.Get("X-RateLimit-Reset"))
	require.Empty(t, r.h.Get("Retry-After"))

	require.Equal(t, 200, e.post(t, "check", `{"rule":"r","key":"alice"}`).code)
	e.now.Add(300_000)
	r = e.post(t, "check", `{"rule":"r","key":"alice"}`)
	require.Equal(t, 429, r.code)
	d = r.decision(t)
	require.False(t, d.Allowed)
	require.False(t, d.Taken)
	require.Equal(t, int64(49_700), d.RetryAfterMS)
	require.Equal(t, int64(50), d.RetryAfter, "rounded up, never early")
	require.Equal(t, "50", r.h.Get("Retry-After"))

	r = e.post(t, "peek", `{"rule":"r","key":"alice"}`)
	require.Equal(t, 429, r.code, "peek answers what check would")
	require.True(t, r.decision(t).Peek)
	require.Equal(t, 200, e.post(t, "peek", `{"rule":"r","key":"bob"}`).code)
	require.Equal(t, 1, e.mem.Len(), "peeking bob stored nothing")

	r = e.post(t, "reset", `{"rule":"r","key":"alice"}`)
	require.Equal(t, 200, r.code, string(r.body))
	require.JSONEq(t, `{"reset":true,"rule":"r","key":"alice"}`, string(r.body))
	r = e.post(t, "check", `{"rule":"r","key":"alice","cost":2}`)
	require.Equal(t, 200, r.code)
	require.Equal(t, int64(0), r.decision(t).Remaining)
}

// A denial by the daily limit reports the daily limit, in the body and the
// headers, and the burst limit's quota is not spent.
func TestEveryFieldAndTheDenyingLimit(t *testing.T) {
	e := newEnv(t, `
rules:
  - name: plan
    limits:
      - {name: burst, strategy: token, limit: 10, window: 1s}
      - {name: daily, strategy: fixed, limit: 3, window: 1d}
`, nil)
	for range 3 {
		require.Equal(t, 200, e.post(t, "check", `{"rule":"plan","key":"k"}`).code)
	}
	r := e.post(t, "check", `{"rule":"plan","key":"k"}`)
	require.Equal(t, 429, r.code)
	// 10 s into the day: 86,390 s until the daily window ends.
	require.JSONEq(t, `{
		"allowed": false, "rule": "plan", "key": "k", "cost": 1, "peek": false, "taken": false, "fail_open": false,
		"limit_name": "daily", "limit": 3, "remaining": 0, "window_ms": 86400000,
		"reset_after_ms": 86390000, "reset_after": 86390, "retry_after_ms": 86390000, "retry_after": 86390,
		"never": false, "delay_ms": 0, "next_after_ms": 86390000, "next_after": 86390,
		"limits": [
			{"name": "burst"},
			{"name": "daily", "allowed": false, "limit": 3, "remaining": 0, "window_ms": 86400000, "reset_after_ms": 86390000,
			 "reset_after": 86390, "retry_after_ms": 86390000, "retry_after": 86390, "never": false, "delay_ms": 0,
			 "next_after_ms": 86390000, "next_after": 86390}
		]}`, burstNameOnly(t, r.body))
	require.True(t, r.decision(t).Limits[0].Allowed, "the burst limit alone would pass")
	// Both limits in both fields, the denying one first in RateLimit; the
	// burst, not charged, has 7 tokens left and gets the next back in a
	// tenth of a second.
	require.Equal(t, `"burst";q=10;w=1, "daily";q=3;w=86400`, r.h.Get("RateLimit-Policy"))
	require.Equal(t, `"daily";r=0;t=86390, "burst";r=7;t=1`, r.h.Get("RateLimit"))
	require.Equal(t, "3", r.h.Get("X-RateLimit-Limit"))
	require.Equal(t, "86390", r.h.Get("Retry-After"))
}

// A DecisionRequest marshals back to the JSON it was decoded from, inline
// limits included.
func TestDecisionRequestRoundTrip(t *testing.T) {
	for _, body := range []string{
		`{"limits":[{"name":"m","strategy":"sliding_log","limit":2,"window":"1m"},{"algorithm":"gcra","limit":5,"window":"1s","rate":0}],"key":"u1","cost":3,"fail_open":true}`,
		`{"rule":"r","key":"k"}`,
		`{"limits":[{"strategy":"token","limit":10,"window":"1h","rate":2}],"key":"k"}`,
	} {
		var req DecisionRequest
		require.NoError(t, json.Unmarshal([]byte(body), &req))
		b, err := json.Marshal(req)
		require.NoError(t, err)
		require.JSONEq(t, body, string(b))
		var again DecisionRequest
		require.NoError(t, json.Unmarshal(b, &again))
		require.Equal(t, req, again)
		b2, err := json.Marshal(again)
		require.NoError(t, err)
		require.Equal(t, string(b), string(b2))
	}
}

func TestInlineLimits(t *testing.T) {
	e := newEnv(t, `rules: [{name: r, strategy: fixed, limit: 1, window: 1m}]`, nil)
	body := `{"key":"u1","limits":[{"name":"m","strategy":"sliding_log","limit":2,"window":"1m"},{"strategy":"gcra","limit":5,"window":"1s"}]}`
	r := e.post(t, "check", body)
	require.Equal(t, 200, r.code, string(r.body))
	d := r.decision(t)
	require.Equal(t, "inline", d.Rule)
	require.Len(t, d.Limits, 2)
	require.Equal(t, "gcra_1s", d.Limits[1].Name)
	require.Equal(t, 200, e.post(t, "check", body).code)
	require.Equal(t, 429, e.post(t, "check", body).code)
	// Inline state is apart from the rules': the same key under rule r is fresh.
	require.Equal(t, 200, e.post(t, "check", `{"rule":"r","key":"u1"}`).code)

	r = e.post(t, "check", `{"key":"u1","limits":[{"strategy":"fixd","limit":0,"window":"1m"},{"strategy":"fixed","limit":1,"window":"soon"}]}`)
	require.Equal(t, 400, r.code)
	ej := r.errorJSON(t)
	require.Equal(t, "invalid_limits", ej.Code)
	require.Contains(t, ej.Error, `limits[0].strategy: unknown strategy "fixd"`)
	require.Contains(t, ej.Error, `limits[1].window: "soon"`)

	// A key given twice in an inline limit is refused, as in the
	// configuration, never resolved to one of the values.
	r = e.post(t, "check", `{"key":"u2","limits":[{"strategy":"fixed","limit":1000,"limit":1,"window":"1m"}]}`)
	require.Equal(t, 400, r.code, string(r.body))
	ej = r.errorJSON(t)
	require.Equal(t, "invalid_limits", ej.Code)
	require.Equal(t, `limits[0].limit: given twice in one object`, ej.Error)

	off := newEnv(t, "inline_limits: false\nrules: [{name: r, strategy: fixed, limit: 1, window: 1m}]", nil)
	r = off.post(t, "check", body)
	require.Equal(t, 403, r.code)
	require.Equal(t, "inline_disabled", r.errorJSON(t).Code)
}

func TestCostZeroAndNever(t *testing.T) {
	e := newEnv(t, `rules: [{name: r, strategy: token, limit: 10, window: 1s}]`, nil)
	// Cost 0 reads the quota: only as a peek; a check costs at least 1.
	r := e.post(t, "check", `{"rule":"r","key":"k","cost":0}`)
	require.Equal(t, 400, r.code)
	require.Equal(t, "invalid_cost", r.errorJSON(t).Code)
	r = e.post(t, "peek", `{"rule":"r","key":"k","cost":0}`)
	require.Equal(t, 200, r.code)
	require.Equal(t, int64(10), r.decision(t).Remaining)
	r = e.post(t, "check", `{"rule":"r","key":"k","cost":11}`)
	require.Equal(t, 429, r.code)
	d := r.decision(t)
	require.True(t, d.Never)
	require.Equal(t, int64(-1), d.RetryAfterMS)
	require.Equal(t, int64(-1), d.RetryAfter)
	require.Empty(t, r.h.Get("Retry-After"), "no retry can pass")
	require.Equal(t, 200, e.post(t, "check", `{"rule":"r","key":"k","cost":10}`).code)
}

// Malformed, oversized and invalid requests get a clear 4xx and change no
// state.
func TestBadRequestsLeaveStateUntouched(t *testing.T) {
	e := newEnv(t, `rules: [{name: r, strategy: fixed, limit: 5, window: 1m}]`, func(o *Options) { o.MaxBodyBytes = 1024 })
	huge := `{"rule":"r","key":"k","pad":"` + strings.Repeat("x", 4096) + `"}`
	for _, c := range []struct {
		name, method, op, body string
		code                   int
		errCode                string
	}{
		{"malformed", "POST", "check", `{"rule":"r","key":`, 400, "invalid_json"},
		{"not an object", "POST", "check", `[1,2]`, 400, "invalid_json"},
		{"empty", "POST", "check", ``, 400, "invalid_json"},
		{"two values", "POST", "check", `{"rule":"r","key":"k"} {}`, 400, "invalid_json"},
		{"wrong type", "POST", "check", `{"rule":"r","key":"k","cost":"1"}`, 400, "invalid_cost"},
		{"wrong type of rule", "POST", "check", `{"rule":1,"key":"k"}`, 400, "invalid_json"},
		{"huge", "POST", "check", huge, 413, "body_too_large"},
		{"unknown field", "POST", "check", `{"rule":"r","key":"k","kye":"x"}`, 400, "unknown_field"},
		{"key given twice", "POST", "check", `{"rule":"r","key":"k","key":"other"}`, 400, "invalid_json"},
		{"rule given twice", "POST", "check", `{"rule":"nope","key":"k","rule":"r"}`, 400, "invalid_json"},
		{"batch item key twice", "POST", "batch", `{"items":[{"rule":"r","key":"k","key":"j"}]}`, 400, "invalid_json"},
		{"items given twice", "POST", "batch", `{"items":[{"rule":"r","key":"k"}],"items":[{"rule":"r","key":"j"}]}`, 400, "invalid_json"},
		{"unknown rule", "POST", "check", `{"rule":"nope","key":"k"}`, 404, "unknown_rule"},
		{"no rule", "POST", "check", `{"key":"k"}`, 400, "invalid_limits"},
		{"rule and limits", "POST", "check", `{"rule":"r","key":"k","limits":[]}`, 400, "invalid_limits"},
		{"missing key", "POST", "check", `{"rule":"r"}`, 400, "invalid_key"},
		{"key with space", "POST", "check", `{"rule":"r","key":"a b"}`, 400, "invalid_key"},
		{"key with control", "POST", "check", `{"rule":"r","key":"a\u0001"}`, 400, "invalid_key"},
		{"key too long", "POST", "check", `{"rule":"r","key":"` + strings.Repeat("k", 300) + `"}`, 400, "invalid_key"},
		{"negative cost", "POST", "check", `{"rule":"r","key":"k","cost":-1}`, 400, "invalid_cost"},
		{"huge cost", "POST", "check", `{"rule":"r","key":"k","cost":2000000000000}`, 400, "invalid_cost"},
		{"fail_open on a rule", "POST", "check", `{"rule":"r","key":"k","fail_open":true}`, 400, "invalid_limits"},
		{"reset with cost", "POST", "reset", `{"rule":"r","key":"k","cost":1}`, 400, "invalid_cost"},
		{"reset bad key", "POST", "reset", `{"rule":"r","key":"a b"}`, 400, "invalid_key"},
		{"GET check", "GET", "check", ``, 405, "method_not_allowed"},
		{"unknown op", "POST", "allow", `{}`, 404, "not_found"},
		{"empty batch", "POST", "batch", `{"items":[]}`, 400, "invalid_batch"},
		{"batch bad item", "POST", "batch", `{"items":[{"rule":"r","key":"k"},{"rule":"r","key":"a b"}]}`, 400, "invalid_key"},
		{"batch unknown rule", "POST", "batch", `{"items":[{"rule":"r","key":"k"},{"rule":"x","key":"k"}]}`, 404, "unknown_rule"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(t, c.method, APIPrefix+c.op, c.body)
			require.Equal(t, c.code, r.code, string(r.body))
			require.Equal(t, "application/json", r.h.Get("Content-Type"))
			ej := r.errorJSON(t)
			require.Equal(t, c.errCode, ej.Code, ej.Error)
			require.NotEmpty(t, ej.Error)
			require.Empty(t, r.h.Get("RateLimit"), "nothing was decided")
		})
	}
	require.Equal(t, 0, e.mem.Len(), "no state was written")
	require.Equal(t, 200, e.do(t, "POST", APIPrefix+"peek", "{\"rule\":\"r\",\"key\":\"k\"}\n  ").code, "trailing white space is not data")
	r := e.post(t, "check", `{"rule":"r","key":"k"}`)
	require.Equal(t, int64(4), r.decision(t).Remaining, "the key's quota is whole")
	r = e.post(t, "batch", `{"items":[{"rule":"r","key":"k"},{"rule":"r","key":"a b"}]}`)
	require.Contains(t, r.errorJSON(t).Error, "items[1].")
}

func TestBatchAtomic(t *testing.T) {
	e := newEnv(t, `rules: [{name: r, strategy: fixed, limit: 2, window: 1m}, {name: s, strategy: token, limit: 5, window: 1s}]`, nil)
	batch := func(body string) (reply, BatchJSON) {
		r := e.post(t, "batch", body)
		var b BatchJSON
		require.NoError(t, json.Unmarshal(r.body, &b), string(r.body))
		return r, b
	}
	r, b := batch(`{"items":[{"rule":"r","key":"a"},{"rule":"s","key":"b","cost":2},{"limits":[{"strategy":"fixed","limit":9,"window":"1h"}],"key":"c"}]}`)
	require.Equal(t, 200, r.code)
	require.True(t, b.Allowed)
	require.True(t, b.Atomic)
	require.Len(t, b.Results, 3)
	for _, d := range b.Results {
		require.True(t, d.Taken)
	}
	require.Equal(t, 0, b.Deciding, "fewest remaining: a has 1")
	require.Equal(t, `"default";r=1;t=50`, r.h.Get("RateLimit"))

	// a has one left; asking 2 of a and 1 of b is refused whole.
	r, b = batch(`{"items":[{"rule":"s","key":"b"},{"rule":"r","key":"a","cost":2}]}`)
	require.Equal(t, 429, r.code)
	require.False(t, b.Allowed)
	require.False(t, b.Partial)
	require.Equal(t, 1, b.Deciding)
	require.True(t, b.Results[0].Allowed, "b alone would pass")
	require.False(t, b.Results[0].Taken, "but is not taken")
	require.False(t, b.Results[1].Allowed)
	require.NotEmpty(t, r.h.Get("Retry-After"))
	r = e.post(t, "peek", `{"rule":"s","key":"b","cost":0}`)
	require.Equal(t, int64(3), r.decision(t).Remaining, "b kept its quota")

	// The same key twice in an atomic batch is refused: combine the costs.
	r = e.post(t, "batch", `{"items":[{"rule":"r","key":"a"},{"rule":"r","key":"a"}]}`)
	require.Equal(t, 400, r.code)
	require.Equal(t, "invalid_batch", r.errorJSON(t).Code)

	// Non-atomic: each item on its own.
	r, b = batch(`{"atomic":false,"items":[{"rule":"s","key":"b"},{"rule":"r","key":"a","cost":2},{"rule":"r","key":"a"}]}`)
	require.Equal(t, 429, r.code)
	require.False(t, b.Atomic)
	require.True(t, b.Results[0].Taken)
	require.False(t, b.Results[1].Allowed)
	require.True(t, b.Results[2].Taken)

	// Peek: nothing taken.
	r, b = batch(`{"peek":true,"items":[{"rule":"s","key":"b"},{"rule":"r","key":"z"}]}`)
	require.Equal(t, 200, r.code)
	require.True(t, b.Peek)
	require.False(t, b.Results[0].Taken)
	require.Equal(t, int64(1), b.Results[0].Remaining, "2 left, 1 after this peek")
}

func TestBatchRaceIsReportedPartial(t *testing.T) {
	e := newEnv(t, `rules: [{name: r, strategy: fixed, limit: 2, window: 1m}]`, func(o *Options) {
		// Drains b right after it is peeked, as a concurrent request
		// could between an atomic batch's two phases.
		o.Store = fakestore.New(t, fakestore.Config{Inner: o.Store, After: func(ctx context.Context, inner store.Store, req store.Request, d core.Decision, err error) {
			if req.Op == store.Peek && req.Key == "b" {
				drain := req
				drain.Op, drain.Cost = store.Take, d.Remaining+req.Cost
				inner.Decide(ctx, drain, nil)
			}
		}})
	})
	r := e.post(t, "batch", `{"items":[{"rule":"r","key":"a"},{"rule":"r","key":"b"},{"rule":"r","key":"c"}]}`)
	require.Equal(t, 429, r.code, string(r.body))
	var b BatchJSON
	require.NoError(t, json.Unmarshal(r.body, &b))
	require.True(t, b.Partial)
	require.True(t, b.Results[0].Taken, "a was taken before b's take was denied")
	require.False(t, b.Results[1].Taken)
	require.False(t, b.Results[1].Allowed)
	require.False(t, b.Results[2].Taken)
	require.NotEmpty(t, b.Results[2].Error, "c was not decided")
	require.Equal(t, 1, b.Deciding)
}

// failing returns a store whose every call fails with err.
func failing(t testing.TB, err error) store.Store {
	s := fakestore.New(t, fakestore.Config{})
	s.Fail(err)
	return s
}

// down returns a store that fails every call as an unreachable backend
// does.
func down(t testing.TB) store.Store { return failing(t, fmt.Errorf("dial: %w", store.ErrUnavailable)) }

func TestStoreFailureFollowsTheRule(t *testing.T) {
	e := newEnv(t, `rules: [{name: open, strategy: fixed, limit: 1, window: 1m, fail_open: true}, {name: closed, strategy: fixed, limit: 1, window: 1m}]`,
		func(o *Options) { o.Store = down(t) })
	r := e.post(t, "check", `{"rule":"open","key":"k"}`)
	require.Equal(t, 200, r.code)
	d := r.decision(t)
	require.True(t, d.Allowed)
	require.True(t, d.FailOpen)
	require.False(t, d.Taken)
	r = e.post(t, "check", `{"rule":"closed","key":"k"}`)
	require.Equal(t, 503, r.code)
	require.Equal(t, "store_unavailable", r.errorJSON(t).Code)
	r = e.post(t, "reset", `{"rule":"open","key":"k"}`)
	require.Equal(t, 503, r.code, "a reset cannot fail open")
	r = e.post(t, "check", `{"key":"k","fail_open":true,"limits":[{"strategy":"fixed","limit":1,"window":"1m"}]}`)
	require.Equal(t, 200, r.code)
	require.True(t, r.decision(t).FailOpen)

	r = e.post(t, "batch", `{"items":[{"rule":"open","key":"k"},{"rule":"closed","key":"k"}]}`)
	require.Equal(t, 503, r.code)

	m := e.do(t, "GET", "/metrics", "")
	for _, want := range []string{
		`rate_limiter_fail_open_total{rule="open"} 2`,
		`rate_limiter_fail_open_total{rule="inline"} 1`,
		`rl_decisions_total{outcome="fail_open",rule="open"} 2`,
		`rl_decisions_total{outcome="fail_closed",rule="closed"} 2`,
		`rl_store_errors_total{rule="closed"} 2`,
		`rl_store_errors_total{rule="open"} 3`,
	} {
		require.Contains(t, string(m.body), want)
	}
}

func TestRulesAndOps(t *testing.T) {
	e := newEnv(t, `rules: [`+hosted+`, {name: b, strategy: sliding, limit: 3, window: 1d}]`, nil)
	r := e.do(t, "GET", APIPrefix+"rules", "")
	require.Equal(t, 200, r.code)
	var out struct {
		Rules []RuleJSON `json:"rules"`
	}
	require.NoError(t, json.Unmarshal(r.body, &out))
	require.Equal(t, "/v1/pay", out.Rules[0].Name)
	require.Equal(t, "token_bucket", out.Rules[0].Limits[0].Strategy)
	require.Equal(t, "10s", out.Rules[0].Limits[0].Window)
	require.Equal(t, "1d", out.Rules[1].Limits[0].Window)

	require.Equal(t, 200, e.do(t, "GET", "/healthz", "").code)
	require.Equal(t, 200, e.do(t, "GET", "/readyz", "").code)
	e.svc.SetDraining()
	require.Equal(t, 503, e.do(t, "GET", "/readyz", "").code)
	require.Equal(t, 200, e.do(t, "GET", "/healthz", "").code)

	failing := newEnv(t, `rules: [`+hosted+`]`, func(o *Options) {
		o.Ready = func(context.Context) error { return fmt.Errorf("connection refused") }
	})
	r = failing.do(t, "GET", "/readyz", "")
	require.Equal(t, 503, r.code)
	require.Contains(t, string(r.body), "connection refused")
}

func TestAPIWithTheWasmDecider(t *testing.T) {
	pool := wasmPool(t)
	e := newEnv(t, `rules: [{name: r, strategy: gcra, limit: 3, window: 1s}]`, func(o *Options) {
		m := memstore.New(&memstore.Config{Clock: o.Clock, SweepInterval: -1, Decider: pool})
		t.Cleanup(func() { m.Close() })
		o.Store = m
	})
	for i := range 4 {
		r := e.post(t, "check", `{"rule":"r","key":"k"}`)
		if i < 3 {
			require.Equal(t, 200, r.code)
		} else {
			require.Equal(t, 429, r.code)
			require.Equal(t, int64(334), r.decision(t).RetryAfterMS)
		}
	}
}

func TestFastEncoderMatchesEncodingJSON(t *testing.T) {
	for _, d := range []DecisionJSON{
		{Limits: []LimitJSON{}},
		{Allowed: true, Rule: "/v1/pay", Key: `we"ird\key`, Cost: 3, Taken: true, LimitName: "burst", Limit: 10, Remaining: 7,
			WindowMS: 1000, ResetAfterMS: 300, ResetAfter: 1, Limits: []LimitJSON{{Name: "burst", Allowed: true, Limit: 10}, {Name: "daily", RetryAfterMS: -1, RetryAfter: -1, Never: true}}},
		{Key: "ctl\x01\x7f\xff é\u2028", Error: "boom", FailOpen: true, Limits: []LimitJSON{}},
		{Rule: "r", Key: "tenant-a:1", Override: "key_prefix:tenant-a:", Error: "boom", Limits: []LimitJSON{}},
		{Allowed: true, Rule: "r", Key: "k", Delta: new(int64(-3)), Limits: []LimitJSON{}},
		{Allowed: true, Rule: "r", Key: "k", Taken: true, Uncharged: []string{"small", `we"ird`}, Limits: []LimitJSON{{Name: "small", Shadow: true}}},
		{Rule: "r", NextAfterMS: 100, NextAfter: 1, Limits: []LimitJSON{{Name: "a", NextAfterMS: 5}}, Explain: &ExplainJSON{
			Rule: &ExplainRuleJSON{Name: "r", Why: []string{"<named>"}}, Limits: []ExplainLimitJSON{{Mode: "enforced"}},
			Fields: [][2]string{{"RateLimit", `"a";r=1`}}, Decision: "x"}},
	} {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		require.NoError(t, enc.Encode(d))
		require.Equal(t, want.String(), string(d.appendJSON(nil)))
	}
}

func TestStoreErrorLogsAreThrottled(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, nil))
	var th throttle
	for range 100 {
		th.log(l, "store failed", "r", fmt.Errorf("down"))
	}
	require.Equal(t, 1, strings.Count(buf.String(), "store failed"))
	th.last.Store(time.Now().Add(-2 * time.Second).UnixNano())
	th.log(l, "store failed", "r", fmt.Errorf("down"))
	require.Contains(t, buf.String(), "suppressed_since_last=99")
}

// The decision API answers failures by the one failure rule
// (outage.Class): only an outage is answered by fail_open; load is 503
// "overloaded" with Retry-After, a corrupt state 500 "internal", on a
// fail_open rule too (the service's copy of the rule answered a corrupt
// state by the fail policy: 200, fail_open, admitted).
func TestAPIFailureClasses(t *testing.T) {
	for _, c := range []struct {
		name       string
		err        error
		code       int
		errCode    string
		retryAfter string
	}{
		{"busy", fmt.Errorf("pool: %w", store.ErrBusy), 503, "overloaded", "1"},
		{"full", fmt.Errorf("memstore: %w", store.ErrFull), 503, "overloaded", "1"},
		{"corrupt state", fmt.Errorf("rl: %q: %w", "k", core.ErrState), 500, "internal", ""},
		{"not an outage", fmt.Errorf("protocol error"), 503, "store_unavailable", "1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, `rules: [{name: open, strategy: fixed, limit: 1, window: 1m, fail_open: true}]`,
				func(o *Options) { o.Store = failing(t, c.err) })
			r := e.post(t, "check", `{"rule":"open","key":"k"}`)
			require.Equal(t, c.code, r.code, string(r.body))
			require.Equal(t, c.errCode, r.errorJSON(t).Code)
			require.Equal(t, c.retryAfter, r.h.Get("Retry-After"))
			r = e.post(t, "batch", `{"items":[{"rule":"open","key":"k"}]}`)
			require.Equal(t, c.code, r.code, string(r.body))
		})
	}
}

// TestAPIMethods: each endpoint answers its method (GET also HEAD, as
// pipeline.Limits says), anything else 405 with Allow from the same list,
// and an unknown endpoint 404 naming them all.
func TestAPIMethods(t *testing.T) {
	e := newEnv(t, `rules: [{name: r, strategy: fixed, limit: 5, window: 1m}]`, nil)
	var s *Service
	for _, ep := range s.apiEndpoints() {
		allow := strings.Join(pipeline.Limits(ep.method), ", ")
		for _, m := range []string{"GET", "HEAD", "POST", "PUT", "DELETE"} {
			r := e.do(t, m, "/v1/ratelimit/"+ep.name, "")
			if strings.Contains(allow, m) {
				require.NotEqual(t, 405, r.code, "%s %s", m, ep.name)
				continue
			}
			require.Equal(t, 405, r.code, "%s %s", m, ep.name)
			require.Equal(t, allow, r.h.Get("Allow"), "%s %s", m, ep.name)
		}
	}
	r := e.do(t, "POST", "/v1/ratelimit/allow", "")
	require.Equal(t, 404, r.code)
	for _, ep := range s.apiEndpoints() {
		require.Contains(t, string(r.body), ep.name)
	}
}

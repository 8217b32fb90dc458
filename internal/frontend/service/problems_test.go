package service

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/request/pipeline"
)

func problemOf(t *testing.T, r reply) pipeline.Problem {
	t.Helper()
	require.Equal(t, pipeline.ProblemContentType, r.h.Get("Content-Type"), string(r.body))
	require.Equal(t, "nosniff", r.h.Get("X-Content-Type-Options"))
	var p pipeline.Problem
	dec := json.NewDecoder(strings.NewReader(string(r.body)))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&p), string(r.body))
	return p
}

// TestProblemDetails: the proxy's 429 is RFC 9457 problem details
// (quota-exceeded, the denying limits in violated-policies) when the client
// accepts JSON, plain text otherwise; the rate-limit fields are on both.
func TestProblemDetails(t *testing.T) {
	e := newEnv(t, `
upstream: demo
rules:
  - name: search
    endpoint: /s
    key_by: header:X-User
    limits:
      - {name: burst, strategy: token, limit: 1, window: 1s}
      - {name: daily, strategy: fixed, limit: 1, window: 1d}
`, nil)
	require.Equal(t, 200, e.do(t, "GET", "/s", "", "X-User", "u").code)
	r := e.do(t, "GET", "/s", "", "X-User", "u", "Accept", "application/json")
	require.Equal(t, 429, r.code)
	p := problemOf(t, r)
	require.Equal(t, pipeline.Problem{Type: "https://iana.org/assignments/http-problem-types#quota-exceeded",
		Title: "Request cannot be satisfied as assigned quota has been exceeded", Status: 429,
		Detail:           "Rate limit exceeded: retry after the Retry-After field's seconds",
		ViolatedPolicies: []string{"daily", "burst"}}, p, "both denied; the daily limit, with the latest retry, first")
	require.NotEmpty(t, r.h.Get("Retry-After"))
	require.Equal(t, `"daily";r=0;t=86390, "burst";r=0;t=1`, r.h.Get("RateLimit"))

	for _, accept := range []string{"", "*/*", "text/plain", "text/html,*/*;q=0.8"} {
		r = e.do(t, "GET", "/s", "", "X-User", "u", "Accept", accept)
		require.Equal(t, 429, r.code)
		require.Equal(t, "text/plain; charset=utf-8", r.h.Get("Content-Type"), accept)
		require.Equal(t, "Rate limit exceeded\n", string(r.body))
	}
	r = e.do(t, "GET", "/s", "", "X-User", "u", "Accept", "application/problem+json")
	require.Equal(t, pipeline.ProblemQuotaExceeded, problemOf(t, r).Type)
}

// problem_details: json and text override the Accept field; a 503 (the
// store down under a fail-closed rule, or load) is
// temporary-reduced-capacity, naming no policy.
func TestProblemDetailsModes(t *testing.T) {
	rules := `
rules:
  - {name: r, endpoint: /r, key_by: header:X-User, strategy: fixed, limit: 1, window: 1m}
`
	e := newEnv(t, "upstream: demo\nproblem_details: json\n"+rules, nil)
	e.do(t, "GET", "/r", "", "X-User", "u")
	require.Equal(t, pipeline.ProblemQuotaExceeded, problemOf(t, e.do(t, "GET", "/r", "", "X-User", "u")).Type, "json: always")

	e = newEnv(t, "upstream: demo\nproblem_details: text\n"+rules, nil)
	e.do(t, "GET", "/r", "", "X-User", "u")
	r := e.do(t, "GET", "/r", "", "X-User", "u", "Accept", "application/json")
	require.Equal(t, "Rate limit exceeded\n", string(r.body), "text: never")

	e = newEnv(t, "upstream: demo\n"+rules, func(o *Options) { o.Store = down(t) })
	r = e.do(t, "GET", "/r", "", "X-User", "u", "Accept", "application/json")
	require.Equal(t, 503, r.code)
	require.Equal(t, "1", r.h.Get("Retry-After"))
	require.Equal(t, pipeline.Problem{Type: "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",
		Title:  "Request cannot be satisfied due to temporary server capacity constraints",
		Status: 503, Detail: "Rate limiter unavailable"}, problemOf(t, r))
	r = e.do(t, "GET", "/r", "", "X-User", "u")
	require.Equal(t, 503, r.code)
	require.Equal(t, "Rate limiter unavailable\n", string(r.body))

	_, err := ParseConfig("c.yaml", "yaml", []byte("problem_details: xml\n"+rules))
	require.ErrorContains(t, err, `problem_details: "xml": want auto, json, text`)
}

// Load is answered before any rule: the in-flight bound's 503 is problem
// details too.
func TestProblemDetailsOverload(t *testing.T) {
	e := newEnv(t, "upstream: demo\nrules: [{name: r, endpoint: /r, strategy: fixed, limit: 1, window: 1m}]", nil)
	var got reply
	e.svc.inFlight.Store(e.svc.maxInFlight) // full
	got = e.do(t, "GET", "/r", "", "Accept", "application/json")
	e.svc.inFlight.Store(0)
	require.Equal(t, 503, got.code)
	p := problemOf(t, got)
	require.Equal(t, pipeline.ProblemReducedCapacity, p.Type)
	require.Equal(t, "Rate limiter overloaded; retry later", p.Detail)
}

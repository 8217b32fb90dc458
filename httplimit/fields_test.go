package httplimit_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/httplimit"
)

// burstDaily is the sample configuration's /v1/search policy.
var burstDaily = rl.MustPolicy(
	rl.Limit{Name: "burst", Algorithm: core.TokenBucket, Limit: 10, Window: time.Second},
	rl.Limit{Name: "daily", Algorithm: core.FixedWindow, Limit: 1000, Window: 24 * time.Hour},
)

// TestEveryLimitInTheFields: both limits of a policy in both fields, t the
// time until more quota comes back (a token in a tenth of a second, the
// daily quota at the day's end, 10 s into the day), the denying limit
// first on a 429, Retry-After and X-RateLimit-* the deciding limit's.
func TestEveryLimitInTheFields(t *testing.T) {
	h, now := setup(t, httplimit.Config{}, burstDaily)
	w := get(h, nil)
	require.Equal(t, 200, w.Code)
	require.Equal(t, `"burst";q=10;w=1, "daily";q=1000;w=86400`, w.Header().Get("RateLimit-Policy"))
	require.Equal(t, `"burst";r=9;t=1, "daily";r=999;t=86390`, w.Header().Get("RateLimit"))
	require.Equal(t, "10", w.Header().Get("X-RateLimit-Limit"))
	require.Equal(t, "9", w.Header().Get("X-RateLimit-Remaining"))
	for range 9 {
		require.Equal(t, 200, get(h, nil).Code)
	}
	now.Add(50_000) // half a token back
	w = get(h, nil)
	require.Equal(t, 429, w.Code)
	require.Equal(t, `"burst";q=10;w=1, "daily";q=1000;w=86400`, w.Header().Get("RateLimit-Policy"), "the policy field stays the same")
	require.Equal(t, `"burst";r=0;t=1, "daily";r=990;t=86390`, w.Header().Get("RateLimit"))
	require.Equal(t, "1", w.Header().Get("Retry-After"))
	require.Equal(t, "0", w.Header().Get("X-RateLimit-Remaining"))
}

// TestFieldsOptions: only the closest limit, a quota unit, and a partition
// key that is the keyed hash of the request's key, never the key.
func TestFieldsOptions(t *testing.T) {
	secret := []byte("a secret of 16+ bytes")
	h, _ := setup(t, httplimit.Config{Fields: httplimit.Fields{Closest: true, QuotaUnit: "content-bytes",
		PartitionKey: httplimit.PartitionKeyFunc(secret, "search")}}, burstDaily)
	w := get(h, nil)
	require.Equal(t, 200, w.Code)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("search\x00192.0.2.1"))
	pk := ";pk=:" + base64.StdEncoding.EncodeToString(m.Sum(nil)[:16]) + ":"
	require.Equal(t, `"burst";q=10;qu="content-bytes";w=1`+pk+`, "daily";q=1000;qu="content-bytes";w=86400`+pk,
		w.Header().Get("RateLimit-Policy"))
	require.Equal(t, `"burst";r=9;t=1`+pk, w.Header().Get("RateLimit"))
	require.NotContains(t, w.Header().Get("RateLimit"), "192.0.2.1")
	other := get(h, func(r *http.Request) { r.RemoteAddr = "192.0.2.2:1" })
	require.NotEqual(t, w.Header().Get("RateLimit"), other.Header().Get("RateLimit"), "another key, another partition")
}

// A Limiter that is not an *rl.Limiter and a policy the middleware cannot
// see: the fields still list every limit (the results no limit wrote are
// dropped).
func TestFieldsThroughAWrappedLimiter(t *testing.T) {
	l, err := rl.New(rl.Config{Policy: burstDaily, Clock: func() int64 { return t0 }})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	h, _ := setup(t, httplimit.Config{Limiter: wrapped{l}}, nil)
	w := get(h, nil)
	require.Equal(t, `"burst";r=9;t=1, "daily";r=999;t=86400`, w.Header().Get("RateLimit"))
}

type wrapped struct{ l *rl.Limiter }

func (w wrapped) Do(ctx context.Context, req rl.Request) (rl.Result, error) { return w.l.Do(ctx, req) }

// TestProblems: a 429 is RFC 9457 problem details (quota-exceeded, the
// denying limits in violated-policies) when the request accepts JSON, plain
// text otherwise, and always or never as Config.Problems says; a 503 is
// temporary-reduced-capacity.
func TestProblems(t *testing.T) {
	h, _ := setup(t, httplimit.Config{}, burstDaily)
	for range 10 {
		get(h, nil)
	}
	accept := func(v string) func(*http.Request) { return func(r *http.Request) { r.Header.Set("Accept", v) } }
	w := get(h, accept("application/json"))
	require.Equal(t, 429, w.Code)
	require.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
	require.JSONEq(t, `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
		"title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,
		"detail":"Rate limit exceeded: retry after the Retry-After field's seconds","violated-policies":["burst"]}`, w.Body.String())
	require.Equal(t, "1", w.Header().Get("Retry-After"))
	w = get(h, accept("*/*"))
	require.Equal(t, "Rate limit exceeded\n", w.Body.String())

	h, _ = setup(t, httplimit.Config{Problems: httplimit.ProblemsJSON}, rl.MustPolicy(rl.Limit{Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute}))
	get(h, nil)
	require.Equal(t, "application/problem+json", get(h, nil).Header().Get("Content-Type"))
	h, _ = setup(t, httplimit.Config{Problems: httplimit.ProblemsText}, rl.MustPolicy(rl.Limit{Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute}))
	get(h, nil)
	require.Equal(t, "Rate limit exceeded\n", get(h, accept("application/json")).Body.String())

	l, err := rl.New(rl.Config{Policy: burstDaily, Store: down(t)})
	require.NoError(t, err)
	h, _ = setup(t, httplimit.Config{Limiter: l}, nil)
	w = get(h, accept("application/json"))
	require.Equal(t, 503, w.Code)
	require.Equal(t, "1", w.Header().Get("Retry-After"))
	require.JSONEq(t, `{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",
		"title":"Request cannot be satisfied due to temporary server capacity constraints","status":503,
		"detail":"Rate limiter unavailable"}`, w.Body.String())
	require.Equal(t, "Rate limiter unavailable\n", get(h, nil).Body.String())
}

// TestShadowLimitsNotInTheFields: a shadow limit never denies and is in no
// field, even once it would deny; a policy of shadow limits alone admits
// every request and sends no field.
func TestShadowLimitsNotInTheFields(t *testing.T) {
	p := rl.MustPolicy(
		rl.Limit{Name: "minute", Algorithm: core.FixedWindow, Limit: 3, Window: time.Minute},
		rl.Limit{Name: "candidate", Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute, Shadow: true},
	)
	h, _ := setup(t, httplimit.Config{}, p)
	for i := range 3 {
		w := get(h, nil)
		require.Equal(t, 200, w.Code, "request %d", i)
		require.Equal(t, `"minute";q=3;w=60`, w.Header().Get("RateLimit-Policy"))
		require.Equal(t, fmt.Sprintf(`"minute";r=%d;t=50`, 2-i), w.Header().Get("RateLimit"))
		require.Equal(t, "3", w.Header().Get("X-RateLimit-Limit"))
	}
	w := get(h, func(r *http.Request) { r.Header.Set("Accept", "application/json") })
	require.Equal(t, 429, w.Code)
	require.Equal(t, `"minute";r=0;t=50`, w.Header().Get("RateLimit"))
	require.NotContains(t, w.Body.String(), "candidate", "a shadow limit is never a violated policy")

	only := rl.MustPolicy(rl.Limit{Name: "candidate", Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute, Shadow: true})
	h, _ = setup(t, httplimit.Config{}, only)
	for i := range 3 {
		w := get(h, nil)
		require.Equal(t, 200, w.Code, "request %d", i)
		for _, f := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"} {
			require.Empty(t, w.Header().Values(f), "request %d: %s", i, f)
		}
	}
}

// TestPolicyFieldPerPolicy: a middleware deciding by a policy per request
// sends each request its own policy's RateLimit-Policy (computed once per
// policy, never another's), whichever came before.
func TestPolicyFieldPerPolicy(t *testing.T) {
	minute := rl.MustPolicy(rl.Limit{Name: "minute", Algorithm: core.FixedWindow, Limit: 5, Window: time.Minute})
	h, _ := setup(t, httplimit.Config{Policy: func(r *http.Request) *rl.Policy {
		if r.Header.Get("X-Plan") == "minute" {
			return minute
		}
		return burstDaily
	}}, burstDaily)
	plan := func(p string) func(*http.Request) { return func(r *http.Request) { r.Header.Set("X-Plan", p) } }
	for range 3 {
		w := get(h, plan("minute"))
		require.Equal(t, []string{`"minute";q=5;w=60`}, w.Header()["Ratelimit-Policy"])
		w = get(h, nil)
		require.Equal(t, []string{`"burst";q=10;w=1, "daily";q=1000;w=86400`}, w.Header()["Ratelimit-Policy"])
		require.Len(t, w.Header()["Ratelimit"], 1)
	}
}

package main

import (
	"math"
	"math/rand/v2"
	"net/http"
	"testing"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/httplimit"
)

// TestHeadersMatchHTTPLimit holds rateHeaders to the strings
// httplimit.SetHeaders writes for the same decision.
func TestHeadersMatchHTTPLimit(t *testing.T) {
	vs := []verdict{
		{allowed: true, name: "minute", limit: 100, remaining: 42, window: 60_000_000, resetAfter: 16_000_001},
		{allowed: false, name: "default", limit: 10, remaining: 0, window: 1_000_000, resetAfter: 1_000_000, retryAfter: 1},
		{allowed: false, name: "default", limit: 10, remaining: 0, window: 1, resetAfter: 999_999, retryAfter: 1_000_000},
		{allowed: false, never: true, name: "big", limit: 3, remaining: 3, window: 500_000, retryAfter: -1},
		{allowed: true, name: `q"uo\te` + "\x01é", limit: 1, remaining: 0, window: 86_400_000_000, resetAfter: 86_400_000_000},
		// 1000 years (a burst of 1000 at 1 per 365 days): beyond a Duration.
		{allowed: false, name: "slow", limit: 1000, remaining: 0, window: 31_536_000_000_000, resetAfter: 31_536_000_000_000_000, retryAfter: 31_536_000_000_000_000},
		{allowed: false, name: "edge", limit: 1, window: 1, resetAfter: math.MaxInt64 / 1000, retryAfter: math.MaxInt64/1000 + 1},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		v := verdict{
			allowed: r.IntN(2) == 0, name: string(rune('a' + r.IntN(26))),
			limit: 1 + r.Int64N(1<<40), remaining: r.Int64N(1 << 40),
			window: 1 + r.Int64N(1e15), resetAfter: r.Int64N(1e17),
		}
		if !v.allowed {
			v.retryAfter = 1 + r.Int64N(1e17)
			if r.IntN(10) == 0 {
				v.never, v.retryAfter = true, -1
			}
		}
		vs = append(vs, v)
	}
	for _, v := range vs {
		want := http.Header{}
		httplimit.SetHeaders(want, rl.Result{LimitResult: rl.LimitResult{
			Allowed: v.allowed, Never: v.never, Name: v.name, Limit: v.limit, Remaining: v.remaining,
			Window: rl.Micros(v.window), ResetAfter: rl.Micros(v.resetAfter), RetryAfter: rl.Micros(max(0, v.retryAfter)),
		}})
		got := http.Header{}
		for _, kv := range rateHeaders(v) {
			got.Add(kv[0], kv[1])
		}
		if len(got) != len(want) {
			t.Fatalf("%+v: got %v, want %v", v, got, want)
		}
		for k := range want {
			if got.Get(k) != want.Get(k) || len(got[k]) != 1 {
				t.Fatalf("%+v: %s = %q, want %q", v, k, got[k], want.Get(k))
			}
		}
	}
}

package service

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The proxy settles a response's cost under the limits its take charged
// (rl.Policy.Charged), as the middleware and the decision API do: a
// shadow limit that would have denied the request, and so was not
// charged, is not refunded units it never took.
func TestProxySettleLeavesUnchargedShadow(t *testing.T) {
	up := costUpstream(t)
	e := newEnv(t, `
upstream: `+up.URL+`
rules:
  - name: r
    endpoint: /v1/chat
    key_by: "header:X-User"
    cost_header: X-Cost
    response_cost_header: X-Cost-Actual
    limits:
      - {name: big, strategy: fixed, limit: 10, window: 1m}
      - {name: small, strategy: fixed, limit: 2, window: 1m, shadow: true}
`, nil)
	const settled = `rl_settles_total{result="settled",rule="r"}`
	send := func(hdr ...string) int {
		t.Helper()
		return e.do(t, "POST", "/v1/chat", "", append([]string{"X-User", "u"}, hdr...)...).code
	}
	require.Equal(t, 200, send("X-Cost", "2"), "both limits charged 2: small is full")
	// Estimate 3: big charged (5 of 10), small would deny (not charged);
	// actual 1: a refund of 2, of big's units alone.
	require.Equal(t, 200, send("X-Cost", "3", "X-Reply-Cost", "1"))
	e.waitMetric(t, settled, 1)
	d := e.post(t, "peek", `{"rule":"r","key":"u","cost":0}`).decision(t)
	require.Len(t, d.Limits, 2)
	require.Equal(t, "big", d.Limits[0].Name)
	require.Equal(t, int64(7), d.Limits[0].Remaining, "big: 2 + 3 - 2 used")
	require.Equal(t, "small", d.Limits[1].Name)
	require.Equal(t, int64(0), d.Limits[1].Remaining, "small keeps the 2 it was charged: the refund was not its")
}

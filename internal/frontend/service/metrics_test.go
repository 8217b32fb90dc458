package service

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func (e *env) metrics(t *testing.T) string {
	t.Helper()
	r := e.do(t, "GET", "/metrics", "")
	require.Equal(t, 200, r.code)
	return string(r.body)
}

// TestMetricsDenialsStoreAndPool: denials are counted by the limit that
// denied (inline limits under "_inline"), every store call is timed by op
// and result, and the WebAssembly pool's instances are exported.
func TestMetricsDenialsStoreAndPool(t *testing.T) {
	e := newEnv(t, `
upstream: demo
rules:
  - name: plan
    endpoint: /p
    key_by: header:X-User
    limits:
      - {name: burst, strategy: token, limit: 10, window: 1s}
      - {name: daily, strategy: fixed, limit: 2, window: 1d}
`, nil)
	require.NoError(t, e.svc.MonitorPool(func() PoolStats { return PoolStats{Instances: 5, Idle: 2, Started: 7, Discarded: 1} }))
	m := e.metrics(t)
	for _, s := range []string{
		`rl_limit_denials_total{limit="burst",rule="plan"} 0`, `rl_limit_denials_total{limit="daily",rule="plan"} 0`,
		`rl_limit_denials_total{limit="_inline",rule="inline"} 0`,
		`rl_wasm_instances{state="busy"} 3`, `rl_wasm_instances{state="idle"} 2`,
		`rl_wasm_instances_started_total 7`, `rl_wasm_instances_discarded_total 1`,
		`rl_store_duration_seconds_count{op="decide",result="ok"} 0`,
	} {
		require.Contains(t, m, s+"\n", "exported from the start")
	}
	for range 2 {
		require.Equal(t, 200, e.do(t, "GET", "/p", "", "X-User", "u").code)
	}
	require.Equal(t, 429, e.do(t, "GET", "/p", "", "X-User", "u").code)
	require.Equal(t, 429, e.post(t, "check", `{"rule":"plan","key":"u"}`).code)
	require.Equal(t, 429, e.post(t, "check", `{"limits":[{"strategy":"fixed","limit":1,"window":"1m"}],"key":"k","cost":2}`).code)
	require.Equal(t, 200, e.post(t, "reset", `{"rule":"plan","key":"u"}`).code)
	m = e.metrics(t)
	for _, s := range []string{
		`rl_limit_denials_total{limit="daily",rule="plan"} 2`, `rl_limit_denials_total{limit="burst",rule="plan"} 0`,
		`rl_limit_denials_total{limit="_inline",rule="inline"} 1`,
		`rl_decisions_total{outcome="denied",rule="plan"} 2`,
		`rl_store_duration_seconds_count{op="decide",result="ok"} 5`,
		`rl_store_duration_seconds_count{op="reset",result="ok"} 1`,
	} {
		require.Contains(t, m, s+"\n")
	}
}

// TestMetricsNeverCarryRequestValues (SECURITY.md): whatever a request
// sends, keys, paths, hosts, headers, queries, rule and limit names,
// unknown fields, no label of /metrics carries it. Label values come from
// the configuration or fixed lists.
func TestMetricsNeverCarryRequestValues(t *testing.T) {
	e := newEnv(t, `
upstream: demo
rules:
  - {name: r, endpoint: /r, key_by: header:X-User, cost_header: X-Cost, strategy: fixed, limit: 1, window: 1m}
  - {name: a, strategy: fixed, limit: 1, window: 1m}
`, nil)
	const mark = "zqxmark"
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/r/" + mark + "?" + mark + "=" + mark, ""},
		{"GET", "/" + mark, ""},
		{"GET", "/r/%2F" + mark, ""},
		{"POST", APIPrefix + "check", `{"rule":"` + mark + `","key":"k"}`},
		{"POST", APIPrefix + "check", `{"rule":"a","key":"` + mark + `"}`},
		{"POST", APIPrefix + "check", `{"rule":"a","key":"` + mark + `"}`},
		{"POST", APIPrefix + "check", `{"rule":"a","key":"k","` + mark + `":1}`},
		{"POST", APIPrefix + "check", `{"limits":[{"name":"` + mark + `","strategy":"fixed","limit":1,"window":"1m"}],"key":"` + mark + `","cost":2}`},
		{"POST", APIPrefix + "check", `{"limits":[{"name":"` + mark + `","strategy":"` + mark + `"}],"key":"k"}`},
		{"POST", APIPrefix + mark, `{}`},
		{"GET", APIPrefix + "check", ``},
	} {
		for _, hdr := range [][]string{{"X-User", mark}, {"X-User", mark, "X-Cost", mark}, {"Host", mark + ".example.com"}, {}} {
			e.do(t, c.method, c.path, c.body, hdr...)
		}
	}
	m := e.metrics(t)
	require.NotContains(t, strings.ToLower(m), mark)
	require.Contains(t, m, `rl_rejected_requests_total{reason="unknown_rule"}`)
}

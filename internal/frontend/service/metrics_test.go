package service

import (
	"strings"
	"sync"
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

// TestMonitorDecider: the decider's metrics and /readyz's line follow what
// the stats function reports at each request: native while the module
// compiles (ready all along), then wasm with its compile time, or native
// for good with rl_wasm_start_failed when the module could not start.
func TestMonitorDecider(t *testing.T) {
	e := newEnv(t, `rules: [{name: r, strategy: fixed, limit: 1, window: 1s}]`, nil)
	r := e.do(t, "GET", "/readyz", "")
	require.Equal(t, "ready\n", string(r.body), "no decider line unless monitored")
	var mu sync.Mutex
	st := DeciderStats{Deciding: "native", Compiling: true}
	require.NoError(t, e.svc.MonitorDecider(func() DeciderStats {
		mu.Lock()
		defer mu.Unlock()
		return st
	}))
	set := func(s DeciderStats) {
		mu.Lock()
		st = s
		mu.Unlock()
	}
	for _, c := range []struct {
		name    string
		stats   DeciderStats
		readyz  string
		metrics []string
	}{
		{"compiling", DeciderStats{Deciding: "native", Compiling: true},
			"ready\ndecider: native (the WebAssembly module is compiling; it takes over once compiled)\n",
			[]string{`rl_decider{decider="native"} 1`, `rl_decider{decider="wasm"} 0`, "rl_wasm_compile_seconds 0", "rl_wasm_start_failed 0"}},
		{"switched", DeciderStats{Deciding: "wasm", CompileSeconds: 2.5},
			"ready\ndecider: wasm\n",
			[]string{`rl_decider{decider="native"} 0`, `rl_decider{decider="wasm"} 1`, "rl_wasm_compile_seconds 2.5", "rl_wasm_start_failed 0"}},
		{"failed", DeciderStats{Deciding: "native", Failed: true, CompileSeconds: 0},
			"ready\ndecider: native (the WebAssembly module could not start: see the log)\n",
			[]string{`rl_decider{decider="native"} 1`, `rl_decider{decider="wasm"} 0`, "rl_wasm_start_failed 1"}},
		{"native by choice", DeciderStats{Deciding: "native"},
			"ready\ndecider: native\n",
			[]string{`rl_decider{decider="native"} 1`, `rl_decider{decider="wasm"} 0`, "rl_wasm_start_failed 0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			set(c.stats)
			r := e.do(t, "GET", "/readyz", "")
			require.Equal(t, 200, r.code)
			require.Equal(t, c.readyz, string(r.body))
			m := e.metrics(t)
			for _, s := range c.metrics {
				require.Contains(t, m, s+"\n")
			}
		})
	}
	e.svc.SetDraining()
	require.Equal(t, 503, e.do(t, "GET", "/readyz", "").code, "draining whichever core decides")
}

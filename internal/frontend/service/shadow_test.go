package service

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/memstore"
)

const shadowRules = `
upstream: demo
rules:
  - name: search
    endpoint: /s
    key_by: header:X-User
    limits:
      - {name: minute, strategy: fixed, limit: 3, window: 1m}
      - {name: candidate, strategy: fixed, limit: 1, window: 1m, shadow: true}
  - name: watch
    endpoint: /w
    key_by: header:X-User
    strategy: gcra
    limit: 1
    window: 1h
    shadow: true
`

// TestShadowDecisionAPI: the answer marks each shadow limit's result, a
// would-deny never denies and is counted in rl_shadow_denials_total (never
// for a peek), the fields leave the shadow limit out, and explain says what
// it did.
func TestShadowDecisionAPI(t *testing.T) {
	e := newEnv(t, shadowRules, nil)
	m := e.metrics(t)
	for _, s := range []string{`rl_shadow_denials_total{limit="candidate",rule="search"} 0`,
		`rl_shadow_denials_total{limit="watch",rule="watch"} 0`, `rl_shadow_denials_total{limit="_inline",rule="inline"} 0`} {
		require.Contains(t, m, s+"\n", "exported from the start")
	}
	require.NotContains(t, m, `rl_shadow_denials_total{limit="minute"`, "an enforced limit has none")

	r := e.post(t, "check", `{"rule":"search","key":"u"}`)
	require.Equal(t, 200, r.code)
	d := r.decision(t)
	require.Equal(t, "minute", d.LimitName)
	require.False(t, d.Limits[0].Shadow)
	require.True(t, d.Limits[1].Shadow)
	require.True(t, d.Limits[1].Allowed)
	require.Equal(t, `"minute";q=3;w=60`, r.h.Get("RateLimit-Policy"))
	require.Contains(t, string(r.body), `"name":"candidate","allowed":true,"shadow":true,"limit":1,`)

	// A peek would deny on the candidate: not a would-deny counted.
	r = e.post(t, "peek", `{"rule":"search","key":"u","cost":1}`)
	require.Equal(t, 200, r.code)
	require.False(t, r.decision(t).Limits[1].Allowed)

	r = e.post(t, "check", `{"rule":"search","key":"u","explain":true}`)
	require.Equal(t, 200, r.code, "a shadow limit never denies")
	d = r.decision(t)
	require.True(t, d.Allowed)
	require.True(t, d.Taken)
	require.False(t, d.Limits[1].Allowed, "the candidate would deny")
	require.Equal(t, "1", r.h.Get("X-RateLimit-Remaining"))
	require.NotContains(t, r.h.Get("RateLimit"), "candidate")
	ex := d.Explain
	require.Equal(t, "enforced", ex.Limits[0].Mode)
	require.Equal(t, "shadow", ex.Limits[1].Mode)
	require.True(t, ex.Limits[1].Shadow)
	require.Contains(t, ex.Limits[1].Outcome, "would deny: not charged")
	require.Empty(t, ex.Limits[0].Outcome)
	for _, f := range ex.Fields {
		require.NotContains(t, f[1], "candidate")
	}

	// Denied by the enforced limit: the candidate's result is a peek,
	// nothing counted.
	require.Equal(t, 200, e.post(t, "check", `{"rule":"search","key":"u"}`).code)
	r = e.post(t, "check", `{"rule":"search","key":"u","explain":true}`)
	require.Equal(t, 429, r.code)
	d = r.decision(t)
	require.Equal(t, "minute", d.LimitName)
	require.Contains(t, d.Explain.Limits[1].Outcome, "peeked: would deny (the request was denied")

	m = e.metrics(t)
	require.Contains(t, m, `rl_shadow_denials_total{limit="candidate",rule="search"} 2`+"\n")
	require.Contains(t, m, `rl_limit_denials_total{limit="minute",rule="search"} 1`+"\n")

	// The rules listing shows the flag.
	var rules struct{ Rules []RuleJSON }
	require.NoError(t, json.Unmarshal(e.do(t, "GET", APIPrefix+"rules", "").body, &rules))
	require.False(t, rules.Rules[0].Limits[0].Shadow)
	require.True(t, rules.Rules[0].Limits[1].Shadow)
	require.True(t, rules.Rules[1].Limits[0].Shadow)

	// Inline shadow limits count under "_inline".
	for range 2 {
		r = e.post(t, "check", `{"limits":[{"strategy":"fixed","limit":5,"window":"1m"},{"name":"c","strategy":"fixed","limit":1,"window":"1m","shadow":true}],"key":"k"}`)
		require.Equal(t, 200, r.code)
	}
	require.Contains(t, e.metrics(t), `rl_shadow_denials_total{limit="_inline",rule="inline"} 1`+"\n")
}

// TestShadowProxy: through the proxy, a shadow limit never denies and is in
// no field; a rule of only shadow limits admits everything and sends no
// field; would-denies are counted.
func TestShadowProxy(t *testing.T) {
	e := newEnv(t, shadowRules, nil)
	for i := range 4 {
		r := e.do(t, "GET", "/s", "", "X-User", "u")
		want := 200
		if i == 3 {
			want = 429
		}
		require.Equal(t, want, r.code, "request %d", i)
		require.Equal(t, `"minute";q=3;w=60`, r.h.Get("RateLimit-Policy"))
		require.NotContains(t, r.h.Get("RateLimit"), "candidate")
	}
	for i := range 3 {
		r := e.do(t, "GET", "/w", "", "X-User", "u")
		require.Equal(t, 200, r.code, "request %d", i)
		require.Empty(t, r.h.Values("RateLimit-Policy"))
		require.Empty(t, r.h.Values("RateLimit"))
		require.Empty(t, r.h.Values("X-RateLimit-Limit"))
	}
	m := e.metrics(t)
	require.Contains(t, m, `rl_shadow_denials_total{limit="candidate",rule="search"} 2`+"\n")
	require.Contains(t, m, `rl_shadow_denials_total{limit="watch",rule="watch"} 2`+"\n")
	require.Contains(t, m, `rl_decisions_total{outcome="allowed",rule="watch"} 3`+"\n")
}

// TestShadowUnsupported: over a store that cannot decide shadow limits,
// a configuration with one is refused at New and on reload (the rules in
// force kept), and inline shadow limits are a 400.
func TestShadowUnsupported(t *testing.T) {
	errNo := errors.New("no shadow here")
	cfg, err := ParseConfig("test.yaml", "yaml", []byte(shadowRules))
	require.NoError(t, err)
	_, err = New(cfg, Options{Store: memstore.New(nil), Logger: quietLogger(), ShadowUnsupported: errNo})
	require.ErrorIs(t, err, errNo)
	require.ErrorContains(t, err, `rule "search" has a shadow limit`)
	// An override's shadow limit too: its policy is compiled as the
	// rule's is (engine.Compile).
	cfg, err = ParseConfig("test.yaml", "yaml", []byte(`rules: [{name: r, strategy: fixed, limit: 2, window: 1m,
  overrides: [{key: vip, limits: [{name: a, strategy: fixed, limit: 9, window: 1m}, {name: c, strategy: fixed, limit: 5, window: 1m, shadow: true}]}]}]`))
	require.NoError(t, err)
	_, err = New(cfg, Options{Store: memstore.New(nil), Logger: quietLogger(), ShadowUnsupported: errNo})
	require.ErrorIs(t, err, errNo)
	require.ErrorContains(t, err, `override key:vip has a shadow limit`)

	e := newEnv(t, `rules: [{name: r, strategy: fixed, limit: 2, window: 1m}]`, func(o *Options) { o.ShadowUnsupported = errNo })
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte(shadowRules), 0o600))
	require.ErrorIs(t, e.svc.Reload(path), errNo)
	require.Len(t, e.svc.Config().Rules, 1, "the rules in force are kept")
	r := e.post(t, "check", `{"limits":[{"strategy":"fixed","limit":1,"window":"1m","shadow":true}],"key":"k"}`)
	require.Equal(t, 400, r.code)
	require.Equal(t, "invalid_limits", r.errorJSON(t).Code)
	require.Equal(t, 200, e.post(t, "check", `{"rule":"r","key":"k"}`).code)
}

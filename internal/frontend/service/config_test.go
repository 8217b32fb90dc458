package service

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/engine"
	"github.com/rlcore/rl/internal/request/ruleconfig"
)

const hosted = `{"endpoint":"/v1/pay","strategy":"token_bucket","key_by":"api_key","limit":100,"window":"10s","fail_open":false}`

func TestHostedRuleShapeAsIs(t *testing.T) {
	for name, c := range map[string]struct{ format, text string }{
		"json object": {"json", `{"rules":[` + hosted + `]}`},
		"json list":   {"json", `[` + hosted + `]`},
		"yaml flow":   {"yaml", "rules:\n  - " + hosted + "\n"},
		"yaml block": {"yaml", `rules:
  - endpoint: /v1/pay
    strategy: token_bucket
    key_by: api_key
    limit: 100
    window: 10s
    fail_open: false
`},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := ParseConfig("x."+c.format, c.format, []byte(c.text))
			require.NoError(t, err)
			require.Len(t, cfg.Rules, 1)
			r := cfg.Rules[0]
			require.Equal(t, "/v1/pay", r.Name, "the endpoint names an unnamed rule")
			require.Equal(t, "/v1/pay", r.Endpoint)
			require.Equal(t, "api_key", r.KeyBy.String())
			require.False(t, r.FailOpen)
			require.Equal(t, int64(1), r.Cost)
			require.Equal(t, []ruleconfig.NamedLimit{{Name: "default", Limit: core.Limit{Algorithm: core.TokenBucket, Limit: 100, Window: 10_000_000}}}, r.Limits)
			require.True(t, cfg.InlineLimits)
		})
	}
}

func TestStrategiesAndAliases(t *testing.T) {
	for s, want := range map[string]core.Algorithm{
		"fixed": core.FixedWindow, "fixed_window": core.FixedWindow,
		"sliding": core.SlidingWindow, "sliding_window": core.SlidingWindow,
		"sliding_log": core.SlidingLog, "log": core.SlidingLog,
		"token": core.TokenBucket, "token_bucket": core.TokenBucket,
		"leaky": core.LeakyBucket, "leaky_bucket": core.LeakyBucket,
		"gcra": core.GCRA,
	} {
		cfg, err := ParseConfig("x.json", "json", []byte(`[{"name":"r","strategy":"`+s+`","limit":10,"window":"1m"}]`))
		require.NoError(t, err, s)
		require.Equal(t, want, cfg.Rules[0].Limits[0].Algorithm, s)
	}
}

func TestFullRule(t *testing.T) {
	cfg, err := ParseConfig("x.yaml", "yaml", []byte(`
upstream: http://127.0.0.1:9000
trusted_proxies: [10.0.0.0/8, 192.0.2.7, "::1"]
inline_limits: false
rules:
  - name: api
    host: API.example.com
    methods: [get, post]
    key_by: header:X-User
    cost: 2
    cost_header: X-Cost
    fail_open: true
    shape: true
    limits:
      - {name: burst, strategy: leaky, limit: 10, window: 1s, rate: 5}
      - {strategy: fixed, limit: 1000, window: 1d}
      - {algorithm: gcra, limit: 3, window: 500ms}
`))
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:9000", cfg.Upstream)
	require.False(t, cfg.InlineLimits)
	require.Len(t, cfg.TrustedProxies, 3)
	require.Equal(t, "192.0.2.7/32", cfg.TrustedProxies[1].String())
	r := cfg.Rules[0]
	require.Equal(t, "/", r.Endpoint, "a host alone matches every path")
	require.Equal(t, "api.example.com", r.Host)
	require.Equal(t, []string{"GET", "POST"}, r.Methods)
	require.Equal(t, "header:X-User", r.KeyBy.String())
	require.Equal(t, int64(2), r.Cost)
	require.Equal(t, "X-Cost", r.CostHeader)
	require.True(t, r.FailOpen)
	require.True(t, r.Shape)
	require.Equal(t, []ruleconfig.NamedLimit{
		{Name: "burst", Limit: core.Limit{Algorithm: core.LeakyBucket, Limit: 10, Window: 1_000_000, Rate: 5}},
		{Name: "fixed_window_1d", Limit: core.Limit{Algorithm: core.FixedWindow, Limit: 1000, Window: 86_400_000_000}},
		{Name: "gcra_500ms", Limit: core.Limit{Algorithm: core.GCRA, Limit: 3, Window: 500_000}},
	}, r.Limits)
}

// Every mistake is reported at once, naming the file, the rule and the
// field.
func TestProblemsAreCollected(t *testing.T) {
	_, err := ParseConfig("bad.yaml", "yaml", []byte(`
upstream: ftp://x
trusted_proxies: [nonsense]
colour: blue
rules:
  - name: a
    strategy: tokn
    limit: 0
    window: 10
  - endpoint: /b
    strategy: fixed
    limit: 10
    window: 1m
    rate: 5
    key_by: cookie
    cost: -1
    fail_open: "yes"
  - name: c
    limits:
      - {name: x, strategy: sliding_log, limit: 5000, window: 1h}
      - {name: x, strategy: fixed, limit: 1, window: 1s, burst: 3}
  - name: a
    strategy: fixed
    limit: 1
    window: 1s
  - strategy: fixed
    limit: 1
    window: 1s
  - name: d
    strategy: fixed
    limit: 1
    window: 1s
    limits: [{strategy: fixed, limit: 1, window: 1s}]
  - {name: inline, strategy: fixed, limit: 1, window: 1s}
  - name: e
    endpoint: v1/e
    strategy: token
    limit: 1
    window: -1s
`))
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "bad.yaml", ce.File)
	msg := err.Error()
	for _, want := range []string{
		`bad.yaml: upstream: want an http:// or https:// URL`,
		`bad.yaml: trusted_proxies[0]: "nonsense" is neither`,
		`bad.yaml: colour: unknown field`,
		`bad.yaml: rules[0] "a": strategy: unknown strategy "tokn"`,
		`bad.yaml: rules[0] "a": window: want a string, got the number 10`,
		`bad.yaml: rules[1] "/b": rate 5: must be 0 or absent for fixed_window`,
		`bad.yaml: rules[1] "/b": key_by: "cookie": want ip, api_key, api_key:<header>`,
		`bad.yaml: rules[1] "/b": cost: -1 is outside`,
		`bad.yaml: rules[1] "/b": fail_open: want true or false, got the string "yes"`,
		`bad.yaml: rules[2] "c": limits[0]: limit 5000: outside [1, 4096] for sliding_log`,
		`bad.yaml: rules[2] "c": limits[1].burst: unknown field`,
		`bad.yaml: rules[3] "a": name: "a" is also the name of rules[0]`,
		`bad.yaml: rules[4]: name: missing`,
		`bad.yaml: rules[5] "d": limits: give either limits or strategy`,
		`bad.yaml: rules[6] "inline": name: "inline" is reserved`,
		`bad.yaml: rules[7] "e": endpoint: want a path starting with "/"`,
		`bad.yaml: rules[7] "e": window: "-1s": want a positive duration`,
	} {
		require.Contains(t, msg, want)
	}
	// rules[0]'s limit 0 is hidden behind its other mistakes in the same
	// limit only when they stop validation; the count shows all were kept.
	require.GreaterOrEqual(t, len(ce.Problems), 17, msg)
}

// YAML is checked as JSON is: unknown fields at any depth, kinds named by
// field, values JSON has no number for.
func TestYAMLIsCheckedAsJSON(t *testing.T) {
	_, err := ParseConfig("y.yaml", "yaml", []byte(`
api_tokens: [{name: gw, role: check, sha256: "`+strings.Repeat("ab", 32)+`", scope: all}]
rules:
  - name: a
    strategy: fixed
    limit: .inf
    window: 1s
    2: x
  - name: b
    limits: [{strategy: fixed, limit: 1, window: 1s, brust: 2}]
    min_cost: "2"
    shape: 1
`))
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	var got []string
	for _, p := range ce.Problems {
		got = append(got, p.String())
	}
	require.Equal(t, []string{
		`api_tokens[0].scope: unknown field (want one of name, role, sha256)`,
		`rules[0] "a": 2: unknown field (want one of name, endpoint, host, methods, strategy, algorithm, limit, window, rate, shadow, limits, key_by, cost, min_cost, cost_header, response_cost_header, fail_open, ratelimit_fields, quota_unit, partition_key, overrides, shape, global)`,
		`rules[0] "a": limit: want an integer, got the string "+Inf"`,
		`rules[1] "b": limits[0].brust: unknown field (want one of name, strategy, algorithm, limit, window, rate, shadow)`,
		`rules[1] "b": min_cost: want an integer, got the string "2"`,
		`rules[1] "b": shape: want true or false, got the number 1`,
	}, got)

	cfg, err := ParseConfig("y.yaml", "yaml", []byte("rules: [{name: a, strategy: fixed, limit: 0x10, window: 1d, cost: 10, min_cost: 2}]"))
	require.NoError(t, err)
	require.Equal(t, int64(16), cfg.Rules[0].Limits[0].Limit.Limit)
	require.Equal(t, int64(10), cfg.Rules[0].Cost)
	require.Equal(t, int64(2), cfg.Rules[0].MinCost)
}

// YAML keys that are one key in JSON (1 and "1") are refused, never one
// of them dropped.
func TestYAMLKeysCollide(t *testing.T) {
	_, err := ParseConfig("k.yaml", "yaml", []byte(`
rules:
  - name: a
    strategy: fixed
    limit: 1
    window: 1s
    nested: {1.0: x, "1": y}
`))
	require.ErrorContains(t, err, `k.yaml: YAML: key "1" given twice in one mapping (as "1" and 1.0): quote keys so they differ`)
}

// Integer fields are strict in YAML and JSON alike: a number with a
// fraction or an exponent is refused even when whole (as the filter and
// rls refuse it), and only the kind is reported (no "below min_cost" for a
// cost of the wrong kind).
func TestIntegersAreStrict(t *testing.T) {
	for _, tc := range []struct{ format, doc string }{
		{"yaml", `
max_inline_limits: 2.0
ipv4_prefix: 1e1
rules:
  - {name: a, strategy: fixed, limit: 10.0, window: 1s, cost: 1e1, min_cost: 2.0}
  - {name: b, limits: [{strategy: fixed, limit: 1E3, window: 1s}], cost: 3.0, min_cost: 2}`},
		{"json", `{"max_inline_limits": 2.0, "ipv4_prefix": 1e1, "rules": [
  {"name": "a", "strategy": "fixed", "limit": 10.0, "window": "1s", "cost": 1e1, "min_cost": 2.0},
  {"name": "b", "limits": [{"strategy": "fixed", "limit": 1E3, "window": "1s"}], "cost": 3.0, "min_cost": 2}]}`},
	} {
		_, err := ParseConfig("c."+tc.format, tc.format, []byte(tc.doc))
		var ce *ConfigError
		require.ErrorAs(t, err, &ce, tc.format)
		var got []string
		for _, p := range ce.Problems {
			got = append(got, p.String())
		}
		// YAML floats reach the checks as JSON numbers with a fraction.
		ten, two, thousand := "10.0", "2.0", "1000.0"
		if tc.format == "json" {
			ten, two, thousand = "1e1", "2.0", "1E3"
		}
		require.Equal(t, []string{
			`ipv4_prefix: want an integer, got the number ` + ten,
			`max_inline_limits: want an integer, got the number ` + two,
			`rules[0] "a": limit: want an integer, got the number 10.0`,
			`rules[0] "a": cost: want an integer, got the number ` + ten,
			`rules[0] "a": min_cost: want an integer, got the number ` + two,
			`rules[1] "b": limits[0].limit: want an integer, got the number ` + thousand,
			`rules[1] "b": cost: want an integer, got the number 3.0`,
		}, got, tc.format)
	}
}

func TestLoadConfigByExtension(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
		return p
	}
	_, err := LoadConfig(write("a.json", `{"rules":[`+hosted+`]}`))
	require.NoError(t, err)
	_, err = LoadConfig(write("a.yml", "rules: [{name: x, strategy: fixed, limit: 1, window: 1s}]"))
	require.NoError(t, err)
	_, err = LoadConfig(write("a.toml", ""))
	require.ErrorContains(t, err, "unknown extension")
	_, err = LoadConfig(write("b.json", "{\n  \"rules\": [,]\n}"))
	require.ErrorContains(t, err, "b.json: JSON: line 2")
	_, err = LoadConfig(write("c.yaml", "rules:\n  - name: [\n"))
	require.ErrorContains(t, err, "c.yaml: YAML")
	_, err = LoadConfig(write("d.yaml", ""))
	require.ErrorContains(t, err, "empty file")
	_, err = LoadConfig(filepath.Join(dir, "missing.yaml"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestSampleConfigIsValid(t *testing.T) {
	cfg, err := LoadConfig("../../../cmd/rl-wasm-host/sample.yaml")
	require.NoError(t, err)
	require.Equal(t, "demo", cfg.Upstream)
	names := []string{}
	for _, r := range cfg.Rules {
		names = append(names, r.Name)
	}
	require.Equal(t, "/v1/pay,search,export,login,webhooks,default", strings.Join(names, ","))
}

// FuzzParseConfig: any input is either a *ConfigError or a configuration
// whose every rule builds a policy (go test -fuzz FuzzParseConfig ./service).
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`[` + hosted + `]`,
		`{"rules":[{"name":"a","limits":[{"strategy":"gcra","limit":5,"window":"1d","rate":2}]}]}`,
		`{"upstream":"demo","trusted_proxies":["10.0.0.0/8"],"rules":[{"endpoint":"/","host":"*.x","methods":"GET","strategy":"leaky","limit":1,"window":"1ms","cost_header":"X-C","shape":true}]}`,
		`{"rules":[{"strategy":"sliding_log","limit":4096,"window":"1s","cost":0}]}`,
		`[{"name":"x","strategy":"fixed","limit":1000,"window":"1h","key_by":"query:k"}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, format := range []string{"json", "yaml"} {
			cfg, err := ParseConfig("f."+format, format, data)
			if err != nil {
				var ce *ConfigError
				if !errors.As(err, &ce) || len(ce.Problems) == 0 {
					t.Fatalf("%s: error %v is not a *ConfigError with problems", format, err)
				}
				continue
			}
			for _, r := range cfg.Rules {
				if _, err := engine.Policy(r.Limits); err != nil {
					t.Fatalf("%s: rule %q passed validation but: %v", format, r.Name, err)
				}
				if r.Name == "" || ruleconfig.CheckKeyBy(r.KeyBy.String(), false) != nil || r.Cost < 0 {
					t.Fatalf("%s: rule %+v", format, r)
				}
			}
		}
	})
}

package service

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNormalizedRoundTrip: the canonical form of a configuration, the
// sample's and one using every top-level field, is a configuration that
// loads to the same canonical form (it is a fixed point), with the
// defaults written out.
func TestNormalizedRoundTrip(t *testing.T) {
	t.Setenv("RL_TEST_PK", "0123456789abcdef")
	full := `
upstream: https://user:pw@up.example.com/base
trusted_proxies: [10.0.0.0/8, 192.0.2.1, "::1"]
ipv4_prefix: 24
ipv6_prefix: 56
upstream_timeout: 90s
inline_limits: false
max_inline_limits: 2
problem_details: json
partition_key_secret_env: RL_TEST_PK
api_tokens:
  - {name: gw, role: check, sha256: "sha256:9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08"}
rules:
  - {endpoint: /v1/pay, strategy: token_bucket, key_by: api_key, limit: 100, window: 10s, rate: 5, fail_open: false}
  - name: s
    host: "*.Example.com"
    methods: [get, post]
    key_by: header:X-User
    cost_header: X-Size
    response_cost_header: X-Size-Actual
    min_cost: 2
    quota_unit: content-bytes
    ratelimit_fields: closest
    partition_key: true
    limits:
      - {strategy: sliding, limit: 10, window: 60s}
      - {name: day, strategy: log, limit: 100, window: 24h}
  - {name: api, strategy: gcra, limit: 5, window: 1m}
`
	for name, yaml := range map[string]string{"full": full, "sample": sampleYAML(t)} {
		cfg, err := ParseConfig(name+".yaml", "yaml", []byte(yaml))
		require.NoError(t, err, name)
		b, err := cfg.MarshalNormalized()
		require.NoError(t, err)
		again, err := ParseConfig(name+".json", "json", b)
		if name == "full" {
			// The password is redacted: the canonical form names the
			// upstream, not its secret.
			require.Contains(t, string(b), `"upstream": "https://user:xxxxx@up.example.com/base"`)
		}
		require.NoError(t, err, "%s\n%s", name, b)
		b2, err := again.MarshalNormalized()
		require.NoError(t, err)
		require.Equal(t, string(b), string(b2), name)
	}
	cfg, err := ParseConfig("full.yaml", "yaml", []byte(full))
	require.NoError(t, err)
	n, err := cfg.Normalized()
	require.NoError(t, err)
	require.Equal(t, []string{"10.0.0.0/8", "192.0.2.1/32", "::1/128"}, n.TrustedProxies)
	require.Equal(t, "1m30s", n.UpstreamTimeout)
	require.Equal(t, []TokenSpecJSON{{Name: "gw", Role: "check", SHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}}, n.APITokens)
	require.Equal(t, RuleJSON{Name: "s", Endpoint: "/", Host: "*.example.com", Methods: []string{"GET", "POST"}, KeyBy: "header:X-User",
		Cost: 2, MinCost: 2, CostHeader: "X-Size", ResponseCostHeader: "X-Size-Actual", RateLimitFields: "closest", QuotaUnit: "content-bytes", PartitionKey: true,
		Limits: []LimitSpecJSON{{Name: "sliding_window_1m", Strategy: "sliding_window", Limit: 10, Window: "1m"},
			{Name: "day", Strategy: "sliding_log", Limit: 100, Window: "1d"}}}, n.Rules[1])
	n, err = mustParse(t, "rules: [{name: a, strategy: fixed, limit: 1, window: 1s}]").Normalized()
	require.NoError(t, err)
	require.Equal(t, NormalizedJSON{TrustedProxies: []string{}, IPv4Prefix: 32, IPv6Prefix: 64, UpstreamTimeout: "30s",
		InlineLimits: true, MaxInlineLimits: 4, ProblemDetails: "auto", Rules: []RuleJSON{{Name: "a", KeyBy: "ip", Cost: 1, MinCost: 1,
			RateLimitFields: "all", QuotaUnit: "requests", Limits: []LimitSpecJSON{{Name: "a", Strategy: "fixed_window", Limit: 1, Window: "1s"}}}}}, n)
}

func sampleYAML(t *testing.T) string {
	t.Helper()
	b, err := readSample()
	require.NoError(t, err)
	return string(b)
}

func mustParse(t *testing.T, yaml string) *Config {
	t.Helper()
	cfg, err := ParseConfig("c.yaml", "yaml", []byte(yaml))
	require.NoError(t, err)
	return cfg
}

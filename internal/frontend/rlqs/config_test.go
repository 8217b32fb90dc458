package rlqs

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
)

func TestParseConfig(t *testing.T) {
	cfg, err := ParseConfig("t.yaml", []byte(`
client_id_metadata: x-rlqs-client
report_interval: 1s
ttl: 3s
rules:
  - domain: envoy
    match: {name: api, tenant: "*"}
    algorithm: token_bucket
    limit: 100
    window: 1s
    rate: 100
`))
	require.NoError(t, err)
	require.Equal(t, "x-rlqs-client", cfg.ClientIDMetadata)
	require.Equal(t, int64(1_000_000), cfg.Quota.ReportInterval)
	require.Equal(t, int64(3_000_000), cfg.Quota.TTL)
	require.Equal(t, []Rule{{Domain: "envoy", Match: map[string]string{"name": "api", "tenant": "*"},
		Limit: core.Limit{Algorithm: core.TokenBucket, Limit: 100, Window: 1_000_000, Rate: 100}}}, cfg.Rules)
	_, err = New(cfg)
	require.NoError(t, err)

	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown field", "rules: [{algorithm: gcra, limit: 1, window: 1s, burst: 3}]", "field burst not found"},
		{"no rules", "client_id_metadata: x", "no rules"},
		{"TTL not over the report interval", "ttl: 5s\nrules: [{algorithm: gcra, limit: 1, window: 1s}]", "does not outlive the report interval"},
		{"fractional TTL", "ttl: 7.5s\nrules: [{algorithm: gcra, limit: 1, window: 1s}]", "whole number of seconds"},
		{"bad algorithm", "rules: [{algorithm: nope, limit: 1, window: 1s}]", "rules[0].algorithm"},
		{"bad window", "rules: [{algorithm: gcra, limit: 1, window: soon}]", `rules[0].window "soon"`},
		{"too slow for Envoy", "rules: [{algorithm: token_bucket, limit: 1, window: 10000h, rate: 1}]", "less than one token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("t.yaml", []byte(tc.yaml))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

package rls

import (
	"errors"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/frontend/service"
	"github.com/rlcore/rl/memstore"
)

const shadowDomain = `
domain: s
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 3
      shadow_limits:                 # extension: candidates on the same key, never denying
        - {name: candidate, unit: minute, requests_per_unit: 1}
        - {name: hourly, unit: hour, requests_per_unit: 2, algorithm: gcra}
`

func shadowCount(t *testing.T, e *env, limit string) float64 {
	t.Helper()
	var pm dto.Metric
	require.NoError(t, e.srv.m.shadow.WithLabelValues("s", "user", limit).Write(&pm))
	return pm.GetCounter().GetValue()
}

// TestShadowLimits: a descriptor's shadow_limits are decided on its key
// with its rate_limit, never deny, are left out of the header fields, and
// are reported in the response's dynamic_metadata ("shadowLimits") and in
// rl_rls_shadow_denials_total.
func TestShadowLimits(t *testing.T) {
	e := newEnv(t, shadowDomain, envOpts{})
	require.Equal(t, []string{"descriptors[0].rate_limit.shadow_limits"}, e.srv.Config().Domains["s"].Extensions)
	for i := range 4 {
		resp := e.call(t, "s", d("user", "u"))
		want := rlsv3.RateLimitResponse_OK
		if i == 3 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		require.Equal(t, want, resp.OverallCode, "request %d", i)
		for _, h := range resp.ResponseHeadersToAdd {
			require.NotContains(t, h.Value, "candidate")
			require.NotContains(t, h.Value, "hourly")
		}
		sh := resp.DynamicMetadata.GetFields()["shadowLimits"].GetListValue().GetValues()
		require.Len(t, sh, 2, "request %d", i)
		c, h := sh[0].GetStructValue().GetFields(), sh[1].GetStructValue().GetFields()
		require.Equal(t, "candidate", c["limit"].GetStringValue())
		require.Equal(t, float64(0), c["descriptor"].GetNumberValue())
		require.Equal(t, i == 0, c["allowed"].GetBoolValue(), "request %d: the candidate admits the first only", i)
		require.Equal(t, i == 0, c["charged"].GetBoolValue(), "request %d", i)
		require.Equal(t, i < 2, h["charged"].GetBoolValue(), "request %d: hourly admits two", i)
		require.NotContains(t, resp.DynamicMetadata.GetFields(), "domain", "the ERL metadata only with -rls-response-metadata")
	}
	require.Equal(t, float64(2), shadowCount(t, e, "candidate"), "two admitted requests it would have denied")
	require.Equal(t, float64(1), shadowCount(t, e, "hourly"))
	require.Equal(t, float64(3), counter(t, e, "s", "user", "allowed"))
	require.Equal(t, float64(1), counter(t, e, "s", "user", "denied"))

	// A descriptor without shadow limits gets no shadowLimits.
	e = newEnv(t, "domain: p\ndescriptors: [{key: k, rate_limit: {unit: minute, requests_per_unit: 1}}]\n", envOpts{})
	require.Nil(t, e.call(t, "p", d("k", "v")).DynamicMetadata)
}

// TestShadowLimitsConfig: each shadow limit is named, apart from the
// others and from the rate_limit's state ("default", whatever its unit and
// algorithm); not with unlimited or a limit of 0; a store that cannot
// decide them refuses the configuration.
func TestShadowLimitsConfig(t *testing.T) {
	for _, c := range []struct{ rl, want string }{
		{`{unit: minute, requests_per_unit: 3, shadow_limits: [{unit: minute, requests_per_unit: 1}]}`,
			`descriptors[0].rate_limit.shadow_limits[0].name: missing`},
		{`{unit: minute, requests_per_unit: 3, shadow_limits: [{name: default, unit: minute, requests_per_unit: 1}]}`,
			`shadow_limits[0].name: "default" is reserved: the rate_limit's own limit keeps its state under it`},
		{`{unit: hour, requests_per_unit: 3, algorithm: gcra, shadow_limits: [{name: a, unit: minute, requests_per_unit: 1}, {name: default, unit: hour, requests_per_unit: 1}]}`,
			`shadow_limits[1].name: "default" is reserved`},
		{`{unit: minute, requests_per_unit: 3, shadow_limits: [{name: a, unit: minute, requests_per_unit: 1}, {name: a, unit: hour, requests_per_unit: 1}]}`,
			`shadow_limits[1].name: "a" is the name of another shadow limit of this descriptor`},
		{`{unlimited: true, shadow_limits: [{name: a, unit: minute, requests_per_unit: 1}]}`,
			`rate_limit.shadow_limits: must be absent when unlimited is true`},
		{`{unit: minute, requests_per_unit: 0, shadow_limits: [{name: a, unit: minute, requests_per_unit: 1}]}`,
			`rate_limit.shadow_limits: must be absent when requests_per_unit is 0`},
		{`{unit: minute, requests_per_unit: 3, shadow_limits: [{name: a, unit: fortnight, requests_per_unit: 1}]}`,
			`shadow_limits[0].unit: unknown unit "fortnight"`},
		{`{unit: minute, requests_per_unit: 3, shadow_limits: [{name: a, unit: minute, requests_per_unit: 5000, algorithm: log}]}`,
			`shadow_limits[0].requests_per_unit: 5000 is above 4096`},
		{`{unit: minute, requests_per_unit: 3, shadow_limits: [{name: a, unit: minute, requests_per_unit: 1, extra: 1}]}`,
			`shadow_limits[0].extra: unknown field`},
	} {
		_, err := ParseDomain("d.yaml", []byte("domain: d\ndescriptors: [{key: k, rate_limit: "+c.rl+"}]\n"))
		require.ErrorContains(t, err, c.want, c.rl)
	}
	// The rate_limit's state is no longer named for its algorithm and
	// window, so a shadow limit may be.
	_, err := ParseDomain("d.yaml", []byte("domain: d\ndescriptors: [{key: k, rate_limit: {unit: minute, requests_per_unit: 3, shadow_limits: [{name: fixed_window_1m, unit: minute, requests_per_unit: 1}]}}]\n"))
	require.NoError(t, err)

	d, err := ParseDomain("d.yaml", []byte(shadowDomain))
	require.NoError(t, err)
	no := errors.New("no shadow here")
	cfg, err := service.ParseConfig("main.yaml", "yaml", []byte(`rules: [{name: api, strategy: fixed, limit: 10, window: 1s}]`))
	require.NoError(t, err)
	svc, err := service.New(cfg, service.Options{Store: memstore.New(nil), Logger: quietLogger(), ShadowUnsupported: no})
	require.NoError(t, err)
	_, err = New(svc, &Config{Path: "d.yaml", Domains: map[string]*Domain{"s": d}}, Options{Trusted: true})
	require.ErrorIs(t, err, no)
	require.True(t, strings.Contains(err.Error(), `descriptor "user" has shadow_limits`), err)
}

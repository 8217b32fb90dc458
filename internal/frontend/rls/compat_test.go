package rls

import (
	"context"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// Fields of envoyproxy/ratelimit's format beyond its README's examples
// (those are in readme_test.go), decided as its code decides them.

// share_threshold: every value matching the wildcard spends one count, at
// the wildcard's level also when the limit is deeper; the other entries'
// values still count apart.
func TestShareThreshold(t *testing.T) {
	e := newEnv(t, `
domain: d
descriptors:
  - key: route
    value: "api/*"
    share_threshold: true
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 3}
  - key: route
    value: "web/*/x"
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 1}
`, envOpts{})
	require.Equal(t, 1, e.admitted(t, 1, "d", d("route", "api/v1", "method", "GET")))
	require.Equal(t, 2, e.admitted(t, 3, "d", d("route", "api/v2", "method", "GET")), "api/v1 and api/v2 share 3")
	require.Equal(t, 3, e.admitted(t, 4, "d", d("route", "api/v1", "method", "POST")), "another method counts apart")
	// Two descriptors of one request sharing a count are one decision of
	// both costs.
	require.Zero(t, e.admitted(t, 1, "d", d("route", "api/a", "method", "PUT"), d("route", "api/b", "method", "PUT"),
		d("route", "api/c", "method", "PUT"), d("route", "api/d", "method", "PUT")))
	require.Equal(t, 3, e.admitted(t, 4, "d", d("route", "api/a", "method", "PUT")), "the denied request charged nothing")
	// The wildcard's own text is a value like any other: it shares too.
	require.Zero(t, e.admitted(t, 1, "d", d("route", "api/*", "method", "GET")))
	// Without share_threshold each matching value counts alone.
	require.Equal(t, 1, e.admitted(t, 2, "d", d("route", "web/1/x", "method", "GET")))
	require.Equal(t, 1, e.admitted(t, 2, "d", d("route", "web/2/x", "method", "GET")))
}

// An unlimited limit replaces the limits it names, as in
// envoyproxy/ratelimit, exempting the request from them, and is never
// replaced itself.
func TestUnlimitedReplaces(t *testing.T) {
	e := newEnv(t, `
domain: d
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 1}
  - key: vip
    rate_limit: {unlimited: true, replaces: [{name: per_user}], requests_per_unit: 5}
  - key: plan
    value: free
    rate_limit: {name: plan, unlimited: true}
  - key: plan
    value: paid
    rate_limit: {unit: minute, requests_per_unit: 1, replaces: [{name: plan}]}
`, envOpts{})
	require.Equal(t, 5, e.admitted(t, 5, "d", d("user", "u"), d("vip", "yes")))
	require.Equal(t, 1, e.admitted(t, 2, "d", d("user", "u")), "the exempted requests charged nothing")
	r := e.call(t, "d", d("plan", "free"), d("plan", "paid"))
	require.Equal(t, OK, r.OverallCode)
	require.Equal(t, uint32(4294967295), r.Statuses[0].LimitRemaining, "unlimited, not replaced")
}

// quota_mode: the request is denied when a limit outside quota_mode denies
// it, or when every quota does; a quota without room is OVER_LIMIT in its
// status alone, and each quota with room is charged (envoyproxy/ratelimit
// debits every matching bucket).
func TestQuotaMode(t *testing.T) {
	e := newEnv(t, `
domain: d
descriptors:
  - {key: service, value: s1, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: service, value: s2, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: service, value: s3, quota_mode: true, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: user, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: service, value: free, quota_mode: true, rate_limit: {unlimited: true}}
`, envOpts{})
	s1, s2, s3 := d("service", "s1"), d("service", "s2"), d("service", "s3")
	r := e.call(t, "d", s1, s2)
	require.Equal(t, OK, r.OverallCode)
	require.Equal(t, []uint32{0, 1}, []uint32{r.Statuses[0].LimitRemaining, r.Statuses[1].LimitRemaining}, "both charged")
	r = e.call(t, "d", s1, s2)
	require.Equal(t, OK, r.OverallCode, "s2 has room")
	require.Equal(t, OVER, r.Statuses[0].Code)
	require.Equal(t, OK, r.Statuses[1].Code)
	require.Zero(t, r.Statuses[1].LimitRemaining)
	for _, h := range r.ResponseHeadersToAdd {
		require.NotEqual(t, "retry-after", h.Key, "an admitted request has no Retry-After")
	}
	r = e.call(t, "d", s1, s2)
	require.Equal(t, OVER, r.OverallCode, "every quota is spent")
	require.Equal(t, []rlsv3.RateLimitResponse_Code{OVER, OVER}, []rlsv3.RateLimitResponse_Code{r.Statuses[0].Code, r.Statuses[1].Code})
	require.Contains(t, r.ResponseHeadersToAdd, &corev3.HeaderValue{Key: "retry-after", Value: "60"})
	// An unlimited quota is no quota: it neither admits nor speaks for
	// the quotas.
	r = e.call(t, "d", d("service", "free"), s1, s2)
	require.Equal(t, OVER, r.OverallCode)
	require.Contains(t, r.ResponseHeadersToAdd, &corev3.HeaderValue{Key: "retry-after", Value: "60"})
	// A shadow quota never denies, so the quotas never do.
	require.Equal(t, 3, e.admitted(t, 3, "d", s1, s2, s3))
	// A limit outside quota_mode still denies alone, and then nothing is
	// charged.
	e.now.Add(60_000_000)
	require.Equal(t, OK, e.call(t, "d", d("user", "u"), s2).OverallCode)
	r = e.call(t, "d", d("user", "u"), s2)
	require.Equal(t, OVER, r.OverallCode)
	require.Equal(t, OK, r.Statuses[1].Code)
	r = e.call(t, "d", s2)
	require.Equal(t, OK, r.OverallCode)
	require.Zero(t, r.Statuses[0].LimitRemaining, "s2 was charged by the admitted request and this one, not the denied one")
	// One quota alone is a limit like any other.
	e.now.Add(60_000_000)
	require.Equal(t, 1, e.admitted(t, 2, "d", s1))
}

// metadata: with Options.ResponseMetadata, the response's dynamic metadata
// has the request and the configured metadata of the descriptors that
// passed, merged; without it, none. The scenario is envoyproxy/ratelimit's
// integration test multiservice-tokenquota: Envoy checks both services'
// quotas (hits_addend 0) and routes by the metadata to one with room.
func TestResponseMetadata(t *testing.T) {
	const yaml = `
domain: d
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata: {service_with_quota: {name: service_1}, first: 1, both: {a: 1}}
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
    metadata: {service_with_quota: {name: service_2, zone: b}, first: 2, both: {b: [x, true]}}
  - key: free
    rate_limit: {unlimited: true}
    metadata: {unlimited: true}
`
	e := newEnv(t, yaml, envOpts{opts: Options{Trusted: true, ResponseMetadata: true}})
	check := func(v string) *commonv3.RateLimitDescriptor { return withCheck(d("service", v)) }
	ask := func(descs ...*commonv3.RateLimitDescriptor) map[string]any {
		r, err := e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: descs, HitsAddend: 3})
		require.NoError(t, err)
		return r.GetDynamicMetadata().AsMap()
	}
	got := ask(check("service_1"), check("service_2"), d("free", "x"))
	require.Equal(t, map[string]any{
		"domain": "d",
		"descriptors": []any{
			map[string]any{"entries": []any{"service=service_1"}, "hitsAddend": 0.0},
			map[string]any{"entries": []any{"service=service_2"}, "hitsAddend": 0.0},
			map[string]any{"entries": []any{"free=x"}},
		},
		"hitsAddend": 3.0,
		"metadata": map[string]any{
			"service_with_quota": map[string]any{"name": "service_1", "zone": "b"},
			"first":              1.0,
			"both":               map[string]any{"a": 1.0, "b": []any{"x", true}},
		},
	}, got, "merged in request order: the first one's field wins, mappings merge; an unlimited descriptor's is not sent")
	require.Equal(t, map[string]any{"name": "service_1"}, ask(check("service_1"))["metadata"].(map[string]any)["service_with_quota"],
		"the configuration is not changed by merging")
	// Envoy routed to service_1 and charged it on the response path.
	require.Equal(t, OK, e.call(t, "d", d("service", "service_1")).OverallCode)
	got = ask(check("service_1"), check("service_2"))
	require.Equal(t, map[string]any{"name": "service_2", "zone": "b"}, got["metadata"].(map[string]any)["service_with_quota"],
		"service_1 has no room: only service_2's metadata")

	off := newEnv(t, yaml, envOpts{})
	require.Nil(t, off.call(t, "d", d("service", "service_1")).DynamicMetadata)
}

// detailed_metric and value_to_metric are accepted and change no metric:
// the descriptor label is the configuration's keys and values, never a
// request's (SECURITY.md), whatever the flags, wildcards or sharing.
func TestMetricsCarryNoRequestValues(t *testing.T) {
	e := newEnv(t, `
domain: d
descriptors:
  - key: unspec
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: route
    value_to_metric: true
    descriptors:
      - key: action
        value: "read*"
        value_to_metric: true
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 100}
  - key: files
    value: "files/*"
    share_threshold: true
    value_to_metric: true
    rate_limit: {unit: hour, requests_per_unit: 10}
`, envOpts{})
	require.Equal(t, 2, e.admitted(t, 3, "d", d("unspec", "secret-1")))
	require.Equal(t, 1, e.admitted(t, 1, "d", d("route", "secret-2", "action", "readsecret-3")))
	require.Equal(t, 1, e.admitted(t, 1, "d", d("files", "files/secret-4")))
	require.Equal(t, 1, e.admitted(t, 1, "d", d("nope", "secret-5")))
	require.Equal(t, 1, e.admitted(t, 1, "secret-6", d("unspec", "secret-7")), "an unknown domain")

	reg := prometheus.NewPedanticRegistry()
	m := e.srv.m
	reg.MustRegister(m.requests, m.descriptors, m.unmatched, m.partial, m.storeErrors)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, pm := range mf.GetMetric() {
			var labels []string
			for _, lp := range pm.GetLabel() {
				require.NotContains(t, lp.GetValue(), "secret", "%s", mf.GetName())
				labels = append(labels, lp.GetValue())
			}
			if mf.GetName() == "rl_rls_descriptor_decisions_total" && pm.GetCounter().GetValue() > 0 {
				got[strings.Join(labels, " ")] = pm.GetCounter().GetValue()
			}
		}
	}
	// Labels in name order: descriptor, domain, outcome.
	require.Equal(t, map[string]float64{
		"unspec d allowed":             2,
		"unspec d denied":              1,
		"route.action_read* d allowed": 1,
		"files_files/* d allowed":      1,
	}, got)
}

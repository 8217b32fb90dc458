package rlqs

import (
	"context"
	"testing"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rlcore/rl/internal/testkit/await"
)

// gathered is the value of the series of name whose labels include
// labels, on reg; ok is false when there is none.
func gathered(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (v float64, ok bool) {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, want := range labels {
				if got[k] != want {
					continue series
				}
			}
			return value(m), true
		}
	}
	return 0, false
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return m.GetUntyped().GetValue()
}

// TestMetrics: the server's metrics count what it receives and sends,
// by the domains its rules name (another domain as "_other"), its streams
// and its buckets.
func TestMetrics(t *testing.T) {
	f := newFixture(t, true, NewMemStore())
	reg := prometheus.NewRegistry()
	for _, c := range f.srv.Collectors() {
		require.NoError(t, reg.Register(c))
	}
	is := func(name string, labels map[string]string, want float64) func() bool {
		return func() bool { v, ok := gathered(t, reg, name, labels); return ok && v == want }
	}
	envoy := map[string]string{"domain": "envoy"}
	kind := func(domain, k string) map[string]string { return map[string]string{"domain": domain, "kind": k} }

	// Every series exists from the start, at 0.
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"rl_rlqs_server_streams", nil}, {"rl_rlqs_server_buckets", nil}, {"rl_rlqs_server_undelivered_total", nil},
		{"rl_rlqs_server_reports_total", envoy}, {"rl_rlqs_server_reports_total", map[string]string{"domain": OtherDomain}},
		{"rl_rlqs_server_assignments_total", kind("envoy", "token_bucket")}, {"rl_rlqs_server_assignments_total", kind(OtherDomain, "abandon")},
	} {
		require.True(t, is(c.name, c.labels, 0)(), "%s%v: want 0 at the start", c.name, c.labels)
	}

	s := f.open(t)
	report(t, s, api, 0, 1, 0)
	tb, _, _ := tokenBucket(t, s)
	require.NotNil(t, tb)
	report(t, s, map[string]string{"name": "other"}, 1, 0, 0) // no rule: DENY_ALL
	tb, _, _ = tokenBucket(t, s)
	require.Nil(t, tb)
	await.Until(t, "the assignments counted", func() bool {
		return is("rl_rlqs_server_assignments_total", kind("envoy", "token_bucket"), 1)() &&
			is("rl_rlqs_server_assignments_total", kind("envoy", "deny_all"), 1)()
	})
	require.True(t, is("rl_rlqs_server_reports_total", envoy, 2)())
	require.True(t, is("rl_rlqs_server_streams", nil, 1)())
	require.NoError(t, f.srv.Tick(context.Background()))
	require.True(t, is("rl_rlqs_server_buckets", nil, 1)(), "the api bucket (the unmatched one is not held)")

	// A domain no rule names: counted as _other.
	o := f.open(t)
	require.NoError(t, o.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "elsewhere",
		BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
			BucketId: &rlqsv3.BucketId{Bucket: api}, TimeElapsed: &durationpb.Duration{}, NumRequestsAllowed: 1}}}))
	tb, _, _ = tokenBucket(t, o)
	require.Nil(t, tb)
	await.Until(t, "the other domain's DENY_ALL counted", is("rl_rlqs_server_assignments_total", kind(OtherDomain, "deny_all"), 1))
	require.True(t, is("rl_rlqs_server_reports_total", map[string]string{"domain": OtherDomain}, 1)())
	require.True(t, is("rl_rlqs_server_streams", nil, 2)())

	require.NoError(t, s.CloseSend())
	require.NoError(t, o.CloseSend())
	await.Until(t, "the streams closed", is("rl_rlqs_server_streams", nil, 0))
}

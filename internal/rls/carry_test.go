package rls

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// TestReloadCarriesUsage (issue 22, item 1): a reload of the rate limit
// service's configuration (Extension.Reload, what SIGHUP runs) that
// changes a descriptor's requests_per_unit decides each value on the usage
// it carries: raised, an exhausted value gets what is left at once;
// lowered, never more than the new limit counting the usage carried, with
// an exact Retry-After no longer than the new limit alone gives. For each
// algorithm (rl's extension "algorithm"). The state is kept per
// descriptor and limit name, which is the algorithm and the unit: a
// change of either starts the value fresh (README).
func TestReloadCarriesUsage(t *testing.T) {
	for _, c := range []struct {
		name, alg, unit string
		before, after   int
		used, more      int
		retry           int64 // µs, of the request after them
	}{
		{"fixed raised", "fixed", "minute", 3, 6, 3, 3, 50_000_000},
		{"fixed lowered", "fixed", "minute", 8, 4, 5, 0, 50_000_000},
		{"sliding raised", "sliding", "minute", 3, 6, 3, 3, 60_000_000},
		{"sliding lowered", "sliding", "minute", 8, 4, 5, 0, 65_000_000},
		{"log raised", "sliding_log", "minute", 3, 6, 3, 3, 60_000_000},
		{"log lowered", "sliding_log", "minute", 8, 4, 5, 0, 60_000_000},
		{"token raised", "token", "second", 3, 6, 3, 3, 166_667},
		{"token lowered", "token", "second", 8, 4, 5, 0, 250_000},
		{"leaky raised", "leaky", "second", 3, 6, 3, 3, 166_667},
		{"leaky lowered", "leaky", "second", 8, 4, 5, 0, 250_000},
		{"gcra raised", "gcra", "second", 3, 6, 3, 3, 166_667},
		{"gcra lowered", "gcra", "second", 8, 4, 5, 0, 250_000},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "d.yaml")
			write := func(n int) {
				require.NoError(t, os.WriteFile(path, []byte(`domain: d
descriptors:
  - {key: user, rate_limit: {unit: `+c.unit+`, requests_per_unit: `+strconv.Itoa(n)+`, algorithm: `+c.alg+`}}
`), 0o600))
			}
			write(c.before)
			e := newEnv(t, "domain: unused\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]", envOpts{})
			e.now.Add(10_000_000) // 10 s into a minute
			ext := NewExtension(ExtensionConfig{Listen: "127.0.0.1:0", ConfigPath: path})
			_, _, err := ext.Start(e.svc)
			require.NoError(t, err)
			t.Cleanup(func() { ext.Shutdown(context.Background()) })
			call := func(user string) *rlsv3.RateLimitResponse {
				t.Helper()
				r, err := ext.srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{d("user", user)}})
				require.NoError(t, err)
				return r
			}
			const ok, over = rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
			for i := range c.used {
				require.Equal(t, ok, call("k").OverallCode, "request %d under the old limit", i)
			}
			write(c.after)
			ext.Reload()
			var pm dto.Metric
			require.NoError(t, ext.srv.m.reloads.WithLabelValues("success").Write(&pm))
			require.Equal(t, 1.0, pm.GetCounter().GetValue())
			for i := range c.more {
				require.Equal(t, ok, call("k").OverallCode, "request %d under the new limit: what is left, at once", i)
			}
			r := call("k")
			require.Equal(t, over, r.OverallCode, "beyond the new limit, counting the usage carried")
			require.Equal(t, uint32(c.after), r.Statuses[0].CurrentLimit.RequestsPerUnit)
			got := retryAfter(r)
			require.Equal(t, strconv.FormatInt((c.retry+999_999)/1_000_000, 10), got)
			var alone string
			for range 10 {
				if a := call("fresh"); a.OverallCode == over {
					alone = retryAfter(a)
					break
				}
			}
			g, _ := strconv.Atoi(got)
			a, _ := strconv.Atoi(alone)
			require.LessOrEqual(t, g, a, "no longer than the new limit alone gives")
			e.now.Add(c.retry - 1)
			require.Equal(t, over, call("k").OverallCode, "1 µs before the retry")
			e.now.Add(1)
			require.Equal(t, ok, call("k").OverallCode, "at the retry")
		})
	}
}

func retryAfter(r *rlsv3.RateLimitResponse) string {
	for _, h := range r.GetResponseHeadersToAdd() {
		if h.GetKey() == "Retry-After" || h.GetKey() == "retry-after" {
			return h.GetValue()
		}
	}
	return ""
}

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

// carryCases are a descriptor's rate_limit changed by a reload (its
// fields other than the key): requests_per_unit raised and lowered for
// every algorithm (rl's extension "algorithm"), then the unit, the
// unit_multiplier and the algorithm changed, alone and together. Used are
// the requests admitted before, more those admitted after it at the same
// instant (what is left), retry the exact Retry-After of the next one, in
// µs. The clock is 10 s into a minute (into an hour and a day too).
var carryCases = []struct {
	name, before, after string
	used, more          int
	retry               int64
}{
	{"fixed raised", "unit: minute, requests_per_unit: 3, algorithm: fixed", "unit: minute, requests_per_unit: 6, algorithm: fixed", 3, 3, 50_000_000},
	{"fixed lowered", "unit: minute, requests_per_unit: 8, algorithm: fixed", "unit: minute, requests_per_unit: 4, algorithm: fixed", 5, 0, 50_000_000},
	{"sliding raised", "unit: minute, requests_per_unit: 3, algorithm: sliding", "unit: minute, requests_per_unit: 6, algorithm: sliding", 3, 3, 60_000_000},
	{"sliding lowered", "unit: minute, requests_per_unit: 8, algorithm: sliding", "unit: minute, requests_per_unit: 4, algorithm: sliding", 5, 0, 65_000_000},
	{"log raised", "unit: minute, requests_per_unit: 3, algorithm: sliding_log", "unit: minute, requests_per_unit: 6, algorithm: sliding_log", 3, 3, 60_000_000},
	{"log lowered", "unit: minute, requests_per_unit: 8, algorithm: sliding_log", "unit: minute, requests_per_unit: 4, algorithm: sliding_log", 5, 0, 60_000_000},
	{"token raised", "unit: second, requests_per_unit: 3, algorithm: token", "unit: second, requests_per_unit: 6, algorithm: token", 3, 3, 166_667},
	{"token lowered", "unit: second, requests_per_unit: 8, algorithm: token", "unit: second, requests_per_unit: 4, algorithm: token", 5, 0, 250_000},
	{"leaky raised", "unit: second, requests_per_unit: 3, algorithm: leaky", "unit: second, requests_per_unit: 6, algorithm: leaky", 3, 3, 166_667},
	{"leaky lowered", "unit: second, requests_per_unit: 8, algorithm: leaky", "unit: second, requests_per_unit: 4, algorithm: leaky", 5, 0, 250_000},
	{"gcra raised", "unit: second, requests_per_unit: 3, algorithm: gcra", "unit: second, requests_per_unit: 6, algorithm: gcra", 3, 3, 166_667},
	{"gcra lowered", "unit: second, requests_per_unit: 8, algorithm: gcra", "unit: second, requests_per_unit: 4, algorithm: gcra", 5, 0, 250_000},

	// The unit: a window's counts are read in the new window that holds
	// the old one's start (the hour from 0 s, the minute from 0 s).
	{"unit raised, fixed", "unit: minute, requests_per_unit: 3", "unit: hour, requests_per_unit: 6", 3, 3, 3_590_000_000},
	{"unit lowered, fixed", "unit: hour, requests_per_unit: 8", "unit: minute, requests_per_unit: 4", 5, 0, 50_000_000},
	{"unit raised, sliding", "unit: minute, requests_per_unit: 3, algorithm: sliding", "unit: hour, requests_per_unit: 6, algorithm: sliding", 3, 3, 4_190_000_000},
	{"unit lowered, log", "unit: hour, requests_per_unit: 8, algorithm: sliding_log", "unit: minute, requests_per_unit: 4, algorithm: sliding_log", 5, 0, 60_000_000},
	// unit_multiplier: a bucket's level is rescaled to the new window.
	{"multiplier raised, token", "unit: second, requests_per_unit: 3, algorithm: token", "unit: second, unit_multiplier: 2, requests_per_unit: 6, algorithm: token", 3, 3, 333_334},
	{"multiplier raised, leaky", "unit: second, requests_per_unit: 3, algorithm: leaky", "unit: second, unit_multiplier: 3, requests_per_unit: 6, algorithm: leaky", 3, 3, 500_000},
	{"multiplier lowered, gcra", "unit: second, unit_multiplier: 10, requests_per_unit: 8, algorithm: gcra", "unit: second, requests_per_unit: 4, algorithm: gcra", 5, 0, 250_000},
	{"multiplier lowered, sliding", "unit: minute, unit_multiplier: 5, requests_per_unit: 8, algorithm: sliding", "unit: minute, requests_per_unit: 4, algorithm: sliding", 5, 0, 65_000_000},
	// The algorithm: the units used, placed at the state's own time (a
	// window's start, here now for a window of a second; a log's newest
	// entry; a bucket's last update) by the new algorithm.
	{"algorithm lowered, fixed to gcra", "unit: second, requests_per_unit: 5, algorithm: fixed", "unit: second, requests_per_unit: 2, algorithm: gcra", 5, 0, 500_000},
	{"algorithm lowered, token to log", "unit: minute, requests_per_unit: 10, algorithm: token", "unit: minute, requests_per_unit: 4, algorithm: sliding_log", 7, 0, 60_000_000},
	{"algorithm raised, sliding to token", "unit: second, requests_per_unit: 3, algorithm: sliding", "unit: second, requests_per_unit: 6, algorithm: token", 3, 3, 166_667},
	{"algorithm raised, log to fixed", "unit: minute, requests_per_unit: 3, algorithm: sliding_log", "unit: minute, requests_per_unit: 6", 3, 3, 50_000_000},
	// Both.
	{"unit and algorithm raised, gcra to fixed", "unit: second, requests_per_unit: 2, algorithm: gcra", "unit: minute, requests_per_unit: 10", 2, 8, 50_000_000},
	{"unit and algorithm lowered, fixed to leaky", "unit: second, requests_per_unit: 5", "unit: minute, requests_per_unit: 4, algorithm: leaky", 5, 0, 15_000_000},
	// An hour's count is placed at the hour's start, 10 s ago, where the
	// leaky bucket has drained 2/3 of a unit since: a shorter retry than
	// the new limit alone gives, never a longer one.
	{"unit and algorithm lowered, hour to leaky minute", "unit: hour, requests_per_unit: 8", "unit: minute, requests_per_unit: 4, algorithm: leaky", 5, 0, 5_000_000},
}

// TestReloadCarriesUsage (issue 22, item 1): a reload of the rate limit
// service's configuration (Extension.Reload, what SIGHUP runs) that
// changes a descriptor's requests_per_unit, unit, unit_multiplier or
// algorithm decides each value on the usage it carries, the descriptor's
// state being kept under one limit name whatever they are: (a) raised,
// an exhausted value gets what is left at once; (b) lowered, never more
// than the new limit counting the usage carried, (c) with an exact
// Retry-After no longer than the new limit alone gives.
func TestReloadCarriesUsage(t *testing.T) {
	for _, c := range carryCases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "d.yaml")
			write := func(rateLimit string) {
				require.NoError(t, os.WriteFile(path, []byte(`domain: d
descriptors:
  - {key: user, rate_limit: {`+rateLimit+`}}
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
			require.Equal(t, ext.srv.Config().Domains["d"].root.any["user"].limit.current, r.Statuses[0].CurrentLimit, "the new limit")
			got := retryAfter(r)
			require.Equal(t, strconv.FormatInt((c.retry+999_999)/1_000_000, 10), got)
			var alone string
			for range 20 {
				if a := call("fresh"); a.OverallCode == over {
					alone = retryAfter(a)
					break
				}
			}
			require.NotEmpty(t, alone)
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

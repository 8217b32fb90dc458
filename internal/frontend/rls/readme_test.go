package rls

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// The examples of envoyproxy/ratelimit's README, as files in
// testdata/envoyproxy-ratelimit (see its README.md), decide as documented
// there, except where a request of several descriptors is denied: there
// nothing is charged here, while envoyproxy/ratelimit charges every
// descriptor (its issue #1060, unless STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
// is set). Metric names differ where the README describes them:
// detailed_metric and value_to_metric change none here (SECURITY.md).

const (
	OK   = rlsv3.RateLimitResponse_OK
	OVER = rlsv3.RateLimitResponse_OVER_LIMIT
)

// erlDir holds envoyproxy/ratelimit's example configurations.
const erlDir = "testdata/envoyproxy-ratelimit"

// erlEnv is newEnv with the example configuration file name of erlDir.
func erlEnv(t testing.TB, name string, o envOpts) *env {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(erlDir, name))
	require.NoError(t, err)
	return newEnv(t, string(data), o)
}

func TestReadmeExample1(t *testing.T) {
	// examples/ratelimit/config/config.yaml is this example too.
	for _, f := range []string{"readme-example01.yaml", "config.yaml"} {
		t.Run(f, func(t *testing.T) { testExample1(t, erlEnv(t, f, envOpts{})) })
	}
}

func testExample1(t *testing.T, e *env) {
	require.Equal(t, 500, e.admitted(t, 501, "mongo_cps", d("database", "users")))
	r := e.call(t, "mongo_cps", d("database", "users"))
	require.Equal(t, OVER, r.OverallCode)
	st := r.Statuses[0]
	require.Equal(t, uint32(500), st.CurrentLimit.RequestsPerUnit)
	require.Equal(t, rlsv3.RateLimitResponse_RateLimit_SECOND, st.CurrentLimit.Unit)
	require.Zero(t, st.LimitRemaining)
	require.Equal(t, time.Second, st.DurationUntilReset.AsDuration())
	// A limit of its own per value.
	require.Equal(t, 500, e.admitted(t, 500, "mongo_cps", d("database", "default")))
	// A value the configuration does not name matches nothing: OK, no limit.
	r = e.call(t, "mongo_cps", d("database", "other"))
	require.Equal(t, OK, r.OverallCode)
	require.Nil(t, r.Statuses[0].CurrentLimit)
	// A new second: the window is fresh.
	e.now.Add(1_000_000)
	require.Equal(t, OK, e.call(t, "mongo_cps", d("database", "users")).OverallCode)
}

func TestReadmeExample2(t *testing.T) {
	e := erlEnv(t, "readme-example02.yaml", envOpts{})
	marketing := func(n string) []*commonv3.RateLimitDescriptor {
		return []*commonv3.RateLimitDescriptor{d("message_type", "marketing", "to_number", n), d("to_number", n)}
	}
	// 5 marketing messages to each number; then denied.
	require.Equal(t, 5, e.admitted(t, 8, "messaging", marketing("2061111111")...))
	require.Equal(t, 5, e.admitted(t, 5, "messaging", marketing("2062222222")...))
	r := e.call(t, "messaging", marketing("2061111111")...)
	require.Equal(t, OVER, r.OverallCode)
	require.Equal(t, OVER, r.Statuses[0].Code)
	require.Equal(t, OK, r.Statuses[1].Code)
	// All or nothing: the denied requests did not charge the per-number
	// limit (envoyproxy/ratelimit would report 100-9 = 91 here).
	require.Equal(t, uint32(95), r.Statuses[1].LimitRemaining)
	// The placeholder alone (no limit at depth 1) matches nothing.
	require.Nil(t, e.call(t, "messaging", d("message_type", "marketing")).Statuses[0].CurrentLimit)
	// 100 messages a day to a number, whatever their type.
	require.Equal(t, 95, e.admitted(t, 100, "messaging", d("to_number", "2061111111")))
	require.Equal(t, 100, e.admitted(t, 101, "messaging", d("to_number", "2063333333")))
}

func TestReadmeExample3(t *testing.T) {
	e := erlEnv(t, "readme-example03.yaml", envOpts{})
	require.Equal(t, 10, e.admitted(t, 12, "edge_proxy_per_ip", d("remote_address", "50.0.0.1")))
	require.Equal(t, 10, e.admitted(t, 12, "edge_proxy_per_ip", d("remote_address", "50.0.0.2")))
	require.Zero(t, e.admitted(t, 3, "edge_proxy_per_ip", d("remote_address", "50.0.0.5")))
	r := e.call(t, "edge_proxy_per_ip", d("remote_address", "50.0.0.5"))
	require.Equal(t, uint32(0), r.Statuses[0].CurrentLimit.RequestsPerUnit)
	e.now.Add(5_000_000)
	require.Zero(t, e.admitted(t, 1, "edge_proxy_per_ip", d("remote_address", "50.0.0.5")))
}

func TestReadmeExample4(t *testing.T) {
	oneLevel := erlEnv(t, "readme-example04a.yaml", envOpts{})
	r := oneLevel.call(t, "example4", d("key", "value", "subkey", "subvalue"))
	require.Equal(t, OK, r.OverallCode)
	require.Nil(t, r.Statuses[0].CurrentLimit, "a request deeper than the configuration matches nothing")

	twoLevels := erlEnv(t, "readme-example04b.yaml", envOpts{})
	require.Equal(t, 300, twoLevels.admitted(t, 301, "example4", d("key", "value", "subkey", "subvalue")))
	require.Nil(t, twoLevels.call(t, "example4", d("key", "value")).Statuses[0].CurrentLimit)
}

func TestReadmeExample5(t *testing.T) {
	e := erlEnv(t, "readme-example05.yaml", envOpts{})
	require.Equal(t, 1000, e.admitted(t, 1000, "internal", d("ldap", "x")))
	st := e.call(t, "internal", d("ldap", "x")).Statuses[0]
	require.Equal(t, uint32(math.MaxUint32), st.LimitRemaining)
	require.Equal(t, 100, e.admitted(t, 101, "internal", d("azure", "x")))
}

func TestReadmeExample6(t *testing.T) {
	e := erlEnv(t, "readme-example06.yaml", envOpts{})
	require.Equal(t, 30, e.admitted(t, 30, "example6", d("service", "auth-service", "user", "user-a")))
	st := e.call(t, "example6", d("service", "auth-service", "user", "user-a")).Statuses[0]
	require.Equal(t, OK, st.Code)
	require.Zero(t, st.LimitRemaining, "the shadow limit is spent, and says so")
	require.Equal(t, 20, e.admitted(t, 30, "example6", d("service", "auth-service", "user", "user-b")))
}

func TestReadmeExample7(t *testing.T) {
	e := erlEnv(t, "readme-example07.yaml", envOpts{})
	one := d("key_1", "value_1", "user", "bkthomps")
	two := d("key_2", "value_2", "user", "bkthomps")
	// Both matched: only the replacing 10/s limit applies.
	require.Equal(t, 10, e.admitted(t, 12, "example7", one, two))
	r := e.call(t, "example7", one, two)
	require.Nil(t, r.Statuses[0].CurrentLimit, "replaced")
	require.Equal(t, uint32(10), r.Statuses[1].CurrentLimit.RequestsPerUnit)
	// ... and the replaced 5/s limit was not touched.
	require.Equal(t, 5, e.admitted(t, 6, "example7", one))
	require.Zero(t, e.admitted(t, 1, "example7", two))
}

// Example 9, a trailing wildcard.
func TestReadmeExample9(t *testing.T) {
	e := erlEnv(t, "readme-example09a.yaml", envOpts{})
	require.Equal(t, 20, e.admitted(t, 21, "example9", d("key1", "value_1")))
	require.Equal(t, 20, e.admitted(t, 21, "example9", d("key1", "value_2")), "a limit per value")
	require.Nil(t, e.call(t, "example9", d("key1", "other")).Statuses[0].CurrentLimit)
}

// Example 8: detailed_metric changes no decision (each value its own 10,
// value1 its 20); the metric is the configuration's "key1", not the
// request's value.
func TestReadmeExample8(t *testing.T) {
	e := erlEnv(t, "readme-example08.yaml", envOpts{})
	require.Equal(t, 10, e.admitted(t, 11, "example8", d("key1", "unspecified_value")))
	require.Equal(t, 10, e.admitted(t, 11, "example8", d("key1", "unspecified_value2")))
	require.Equal(t, 20, e.admitted(t, 21, "example8", d("key1", "value1")))
	require.Equal(t, float64(20), counter(t, e, "example8", "key1", "allowed"))
	require.Equal(t, float64(2), counter(t, e, "example8", "key1", "denied"))
}

// Example 9, middle and several wildcards.
func TestReadmeExample9Middle(t *testing.T) {
	e := erlEnv(t, "readme-example09b.yaml", envOpts{})
	require.Equal(t, 20, e.admitted(t, 21, "example9", d("path", "/api/123/action")))
	require.Equal(t, 20, e.admitted(t, 21, "example9", d("path", "/api/user-id/action")))
	require.Nil(t, e.call(t, "example9", d("path", "/api/123/other")).Statuses[0].CurrentLimit)

	e = erlEnv(t, "readme-example09c.yaml", envOpts{})
	for _, v := range []string{"/api/v1/resource/123/action", "/api/v2/resource/456/action"} {
		require.Equal(t, 20, e.admitted(t, 21, "example9", d("route", v)), v)
	}
	require.Nil(t, e.call(t, "example9", d("route", "/api/v1/resource/123/other")).Statuses[0].CurrentLimit)
}

// Example 10: value_to_metric changes no decision; the metric is the
// configuration's path.
func TestReadmeExample10(t *testing.T) {
	e := erlEnv(t, "readme-example10a.yaml", envOpts{})
	require.Equal(t, 60, e.admitted(t, 61, "example10", d("route", "api", "http_method", "GET", "subject_id", "123")))
	require.Equal(t, 60, e.admitted(t, 61, "example10", d("route", "web", "http_method", "POST", "subject_id", "456")))
	require.Equal(t, float64(120), counter(t, e, "example10", "route.http_method.subject_id", "allowed"))

	e = erlEnv(t, "readme-example10b.yaml", envOpts{})
	require.Equal(t, 100, e.admitted(t, 101, "example10_wildcard", d("user", "alice", "action", "readfile", "resource", "documents")))
	require.Nil(t, e.call(t, "example10_wildcard", d("user", "alice", "action", "write", "resource", "documents")).Statuses[0].CurrentLimit)
	require.Equal(t, float64(100), counter(t, e, "example10_wildcard", "user.action_read*.resource", "allowed"))
}

// Example 11: share_threshold.
func TestReadmeExample11(t *testing.T) {
	e := erlEnv(t, "readme-example11a.yaml", envOpts{})
	require.Equal(t, 5, e.admitted(t, 5, "example11", d("files", "files/a.pdf")))
	require.Equal(t, 5, e.admitted(t, 5, "example11", d("files", "files/b.csv")))
	require.Equal(t, OVER, e.call(t, "example11", d("files", "files/c.txt")).OverallCode, "the shared 10 are spent")
	require.Equal(t, 10, e.admitted(t, 11, "example11", d("files_no_share", "files_no_share/a.pdf")))
	require.Equal(t, 10, e.admitted(t, 11, "example11", d("files_no_share", "files_no_share/b.csv")), "a count of its own")

	e = erlEnv(t, "readme-example11b.yaml", envOpts{})
	require.Equal(t, 30, e.admitted(t, 30, "example11_metrics", d("route", "api/v1", "method", "GET")))
	require.Equal(t, 30, e.admitted(t, 31, "example11_metrics", d("route", "api/v2", "method", "GET")), "api/* shares 60")
	require.Equal(t, 60, e.admitted(t, 61, "example11_metrics", d("route", "api/v1", "method", "POST")), "per method")
	require.Equal(t, float64(120), counter(t, e, "example11_metrics", "route_api/*.method", "allowed"))
}

// counter reads rl_rls_descriptor_decisions_total for a domain, descriptor
// (the configuration's path) and outcome.
func counter(t testing.TB, e *env, domain, path, outcome string) float64 {
	t.Helper()
	var pm dto.Metric
	require.NoError(t, e.srv.m.descriptors.WithLabelValues(domain, path, outcome).Write(&pm))
	return pm.GetCounter().GetValue()
}

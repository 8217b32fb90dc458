package service

import (
	"encoding/base64"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/request/pipeline"
)

// TestSampleSearchFields: the sample configuration's /v1/search (a burst
// token bucket of 10 a second and 1000 a day, key_by ip) answers with both
// limits in both RateLimit fields, t the time until more quota comes back;
// on a 429 the denying limit is first. The proxy and the decision API
// write the same fields from the same code.
func TestSampleSearchFields(t *testing.T) {
	data, err := os.ReadFile("../../../cmd/rl-wasm-host/sample.yaml")
	require.NoError(t, err)
	e := newEnv(t, string(data), nil)
	r := e.do(t, "GET", "/v1/search", "")
	require.Equal(t, 200, r.code, string(r.body))
	require.Equal(t, `"burst";q=10;w=1, "daily";q=1000;w=86400`, r.h.Get("RateLimit-Policy"))
	// 10 s into the day: the daily quota comes back in 86390 s.
	require.Equal(t, `"burst";r=9;t=1, "daily";r=999;t=86390`, r.h.Get("RateLimit"))
	require.Equal(t, "9", r.h.Get("X-RateLimit-Remaining"))
	for range 9 {
		require.Equal(t, 200, e.do(t, "GET", "/v1/search", "").code)
	}
	r = e.do(t, "GET", "/v1/search", "")
	require.Equal(t, 429, r.code)
	require.Equal(t, `"burst";q=10;w=1, "daily";q=1000;w=86400`, r.h.Get("RateLimit-Policy"))
	require.Equal(t, `"burst";r=0;t=1, "daily";r=990;t=86390`, r.h.Get("RateLimit"))
	require.Equal(t, "1", r.h.Get("Retry-After"))

	// The decision API, on the key the proxy used (the test client's IP).
	a := e.post(t, "peek", `{"rule":"search","key":"127.0.0.1","cost":0}`)
	require.Equal(t, 200, a.code, string(a.body))
	require.Equal(t, r.h.Get("RateLimit-Policy"), a.h.Get("RateLimit-Policy"))
	require.Equal(t, `"burst";r=0;t=1, "daily";r=990;t=86390`, a.h.Get("RateLimit"))
	require.Equal(t, int64(1), a.decision(t).Limits[0].NextAfter)
	require.Equal(t, int64(100), a.decision(t).Limits[0].NextAfterMS)
}

// TestRuleFieldOptions: ratelimit_fields: closest, quota_unit and
// partition_key (a keyed hash, the secret from the environment) on the
// proxy and on the decision API, which agree on the partition key.
func TestRuleFieldOptions(t *testing.T) {
	t.Setenv("RL_TEST_PK_SECRET", "0123456789abcdef-secret")
	e := newEnv(t, `
upstream: demo
partition_key_secret_env: RL_TEST_PK_SECRET
rules:
  - name: bytes
    endpoint: /upload
    key_by: header:X-User
    cost_header: X-Size
    quota_unit: content-bytes
    ratelimit_fields: closest
    partition_key: true
    limits:
      - {name: second, strategy: token, limit: 1000, window: 1s}
      - {name: day, strategy: fixed, limit: 100000, window: 1d}
`, nil)
	pk := ";pk=:" + base64.StdEncoding.EncodeToString(pipeline.PartitionKey([]byte("0123456789abcdef-secret"), "bytes", "u")) + ":"
	r := e.do(t, "POST", "/upload", "", "X-User", "u", "X-Size", "600")
	require.Equal(t, 200, r.code, string(r.body))
	require.Equal(t, `"second";q=1000;qu="content-bytes";w=1`+pk+`, "day";q=100000;qu="content-bytes";w=86400`+pk, r.h.Get("RateLimit-Policy"))
	require.Equal(t, `"second";r=400;t=1`+pk, r.h.Get("RateLimit"), "the closest limit alone")
	require.NotContains(t, r.h.Get("RateLimit"), `"u"`)
	a := e.post(t, "check", `{"rule":"bytes","key":"u","cost":100}`)
	require.Equal(t, 200, a.code)
	require.Equal(t, `"second";r=300;t=1`+pk, a.h.Get("RateLimit"), "the API's partition key is the proxy's")
	r = e.do(t, "POST", "/upload", "", "X-User", "v", "X-Size", "1")
	require.NotContains(t, r.h.Get("RateLimit"), pk, "another key, another partition")
}

// partition_key needs a secret: none configured, a variable unset or too
// short, each is a configuration problem that never shows the secret.
func TestPartitionKeySecret(t *testing.T) {
	rule := "rules:\n  - {name: a, strategy: fixed, limit: 1, window: 1s, partition_key: true}\n"
	_, err := ParseConfig("c.yaml", "yaml", []byte(rule))
	require.ErrorContains(t, err, `rules[0] "a": partition_key: needs a secret to key the hash: set partition_key_secret_env`)
	t.Setenv("RL_TEST_SHORT", "tiny-secret")
	_, err = ParseConfig("c.yaml", "yaml", []byte("partition_key_secret_env: RL_TEST_SHORT\n"+rule))
	require.ErrorContains(t, err, "partition_key_secret_env: the environment variable RL_TEST_SHORT holds 11 bytes; want a secret of at least 16")
	require.NotContains(t, err.Error(), "tiny-secret")
	_, err = ParseConfig("c.yaml", "yaml", []byte("partition_key_secret_env: RL_TEST_UNSET_VARIABLE\n"+rule))
	require.ErrorContains(t, err, "holds 0 bytes")
	_, err = ParseConfig("c.yaml", "yaml", []byte("partition_key_secret_env: \"A B\"\n"+rule))
	require.ErrorContains(t, err, `"A B" is not the name of an environment variable`)
	t.Setenv("RL_TEST_LONG", strings.Repeat("s", 32))
	cfg, err := ParseConfig("c.yaml", "yaml", []byte("partition_key_secret_env: RL_TEST_LONG\n"+rule))
	require.NoError(t, err)
	require.True(t, cfg.Rules[0].PartitionKey)
	require.Len(t, cfg.PartitionKeySecret, 32)
}

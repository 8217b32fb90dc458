package rls

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/frontend/service"
)

// overridesYAML expresses per-key overrides in envoyproxy/ratelimit's
// style: a descriptor of the key alone is the generic limit, one with a
// value overrides it for that value, one with a wildcard value for the
// values it matches (longer prefixes listed first), at any depth.
const overridesYAML = `
domain: d
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: api_key
    value: "t-a:*"
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: api_key
    value: "t-*"
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: api_key
    value: "t-a:vip"
    rate_limit: {unit: hour, requests_per_unit: 4}
  - key: tenant
    value: acme
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 1}
      - key: user
        value: "admin-*"
        rate_limit: {unit: hour, requests_per_unit: 2}
      - key: user
        value: root
        rate_limit: {unit: hour, requests_per_unit: 3}
`

// TestOverridesByValue: a descriptor's value overrides the key's generic
// limit for that value, a wildcard value for the values it matches; the
// most specific decides: the value itself (wherever it is listed), then
// the first wildcard that matches (a longer prefix, listed before a
// shorter one), then the key alone. Each value has its own count.
func TestOverridesByValue(t *testing.T) {
	e := newEnv(t, overridesYAML, envOpts{})
	for _, c := range []struct {
		desc []string
		n    int
	}{
		{[]string{"api_key", "t-a:vip"}, 4}, // the value, listed after both wildcards
		{[]string{"api_key", "t-a:x"}, 3},   // the longer prefix
		{[]string{"api_key", "t-a:"}, 3},    // a wildcard matches the prefix itself
		{[]string{"api_key", "t-b"}, 2},     // the shorter prefix
		{[]string{"api_key", "t-a"}, 2},
		{[]string{"api_key", "u"}, 1}, // the key alone
		{[]string{"tenant", "acme", "user", "root"}, 3},
		{[]string{"tenant", "acme", "user", "admin-1"}, 2},
		{[]string{"tenant", "acme", "user", "bob"}, 1},
	} {
		require.Equal(t, c.n, e.admitted(t, c.n+2, "d", d(c.desc...)), "%v", c.desc)
	}
	// The status names the override's limit.
	resp := e.call(t, "d", d("api_key", "t-a:y"))
	require.Equal(t, rlsv3.RateLimitResponse_OK, resp.OverallCode)
	require.Equal(t, uint32(3), resp.Statuses[0].CurrentLimit.RequestsPerUnit)
}

// TestOverrideOrderRefused: a wildcard value that an earlier one of the
// same key matches every value of could never decide (the first wildcard
// in file order that matches does, here as in envoyproxy/ratelimit), so
// the file is refused, naming both: list the more specific first. Wildcards
// that each match values the other does not, another key's, and exact
// values are not affected.
func TestOverrideOrderRefused(t *testing.T) {
	for _, c := range []struct{ name, descs, want string }{
		{"shorter prefix first", `[{key: k, value: "t-*", rate_limit: {unit: hour, requests_per_unit: 2}},
			{key: k, value: "t-a:*", rate_limit: {unit: hour, requests_per_unit: 3}}]`,
			`descriptors[1].value: "t-a:*" is never matched: the wildcard value "t-*" before it (key "k", this level) matches every value it does, and the first wildcard in file order that matches decides; list the more specific first`},
		{"a bare wildcard first", `[{key: k, value: "*", rate_limit: {unit: hour, requests_per_unit: 2}},
			{key: k, value: "/a/*/b", rate_limit: {unit: hour, requests_per_unit: 3}}]`,
			`descriptors[1].value: "/a/*/b" is never matched: the wildcard value "*" before it`},
		{"a middle wildcard hiding another", `[{key: k, value: "/a/*", rate_limit: {unit: hour, requests_per_unit: 2}},
			{key: k, value: "/a/*/b*", rate_limit: {unit: hour, requests_per_unit: 3}}]`,
			`descriptors[1].value: "/a/*/b*" is never matched: the wildcard value "/a/*" before it`},
		// Matching never goes back: a wildcard chosen at one level is kept
		// whatever the next levels hold.
		{"with descriptors below", `[{key: k, value: "t-*", descriptors: [{key: u, rate_limit: {unit: hour, requests_per_unit: 1}}]},
			{key: k, value: "t-a*", descriptors: [{key: v, rate_limit: {unit: hour, requests_per_unit: 1}}]}]`,
			`descriptors[1].value: "t-a*" is never matched`},
		{"nested", `[{key: t, descriptors: [{key: u, value: "a*", rate_limit: {unit: hour, requests_per_unit: 2}},
			{key: u, value: "ab*", rate_limit: {unit: hour, requests_per_unit: 3}}]}]`,
			`descriptors[0].descriptors[1].value: "ab*" is never matched`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseDomain("x.yaml", []byte("{domain: d, descriptors: "+c.descs+"}"))
			var ce *service.ConfigError
			require.True(t, errors.As(err, &ce), "%v", err)
			require.Contains(t, err.Error(), c.want)
		})
	}
	for _, ok := range []string{
		`[{key: k, value: "t-a:*", rate_limit: {unit: hour, requests_per_unit: 3}}, {key: k, value: "t-*", rate_limit: {unit: hour, requests_per_unit: 2}}]`,
		`[{key: k, value: "a*", rate_limit: {unit: hour, requests_per_unit: 3}}, {key: k, value: "*b", rate_limit: {unit: hour, requests_per_unit: 2}}]`,
		`[{key: k, value: "t-*", rate_limit: {unit: hour, requests_per_unit: 3}}, {key: j, value: "t-a*", rate_limit: {unit: hour, requests_per_unit: 2}}]`,
		`[{key: k, value: "t-*", rate_limit: {unit: hour, requests_per_unit: 3}}, {key: k, value: "t-a", rate_limit: {unit: hour, requests_per_unit: 2}}]`,
	} {
		_, err := ParseDomain("x.yaml", []byte("{domain: d, descriptors: "+ok+"}"))
		require.NoError(t, err, ok)
	}
}

// TestOverrideChangeCarriesUsage (issue 22, item 1): a value that starts
// or stops matching an override by a reload (a wildcard or the value
// itself added, removed) changes its limit's parameters, unit and
// algorithm included, and carries its usage across like any changed
// limit, the descriptor's state being kept under one limit name: (a) a
// raised limit admits what is left at once; (b) a lowered one never more
// than itself counting the usage carried, (c) with an exact Retry-After no
// longer than it alone gives (a fresh value under the same limit).
func TestOverrideChangeCarriesUsage(t *testing.T) {
	const generic = "domain: d\ndescriptors:\n  - {key: api_key, rate_limit: {unit: minute, requests_per_unit: 10, algorithm: sliding_log}}\n"
	e := newEnv(t, generic, envOpts{})
	e.now.Add(10_000_000)
	reload := func(overrides string) {
		t.Helper()
		dom, err := ParseDomain("d.yaml", []byte(generic+overrides))
		require.NoError(t, err)
		require.NoError(t, e.srv.SetConfig(&Config{Path: "d.yaml", Domains: map[string]*Domain{"d": dom}}))
	}
	const ok, over = rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	// decide: value is admitted more times at once, then denied by limit
	// with a Retry-After of retry µs (rounded up to seconds), no longer
	// than a fresh value under limit gets, and admitted exactly at it.
	decide := func(value, fresh string, limit uint32, more int, retry int64) {
		t.Helper()
		for i := range more {
			require.Equal(t, ok, e.call(t, "d", d("api_key", value)).OverallCode, "request %d: what is left, at once", i)
		}
		r := e.call(t, "d", d("api_key", value))
		require.Equal(t, over, r.OverallCode, "beyond the limit, counting the usage carried")
		require.Equal(t, limit, r.Statuses[0].CurrentLimit.RequestsPerUnit)
		got := retryAfter(r)
		require.Equal(t, strconv.FormatInt((retry+999_999)/1_000_000, 10), got)
		var alone string
		for range 30 {
			if a := e.call(t, "d", d("api_key", fresh)); a.OverallCode == over {
				require.Equal(t, limit, a.Statuses[0].CurrentLimit.RequestsPerUnit, "the same limit")
				alone = retryAfter(a)
				break
			}
		}
		g, _ := strconv.Atoi(got)
		a, err := strconv.Atoi(alone)
		require.NoError(t, err)
		require.LessOrEqual(t, g, a, "no longer than the limit alone gives")
		e.now.Add(retry - 1)
		require.Equal(t, over, e.call(t, "d", d("api_key", value)).OverallCode, "1 µs before the retry")
		e.now.Add(1)
	}

	// k-1 spends 6 of the generic 10 a minute (a sliding log).
	require.Equal(t, 6, e.admitted(t, 6, "d", d("api_key", "k-1")))

	// A wildcard override of another unit and algorithm raises it: 20 an
	// hour (GCRA) less the 6 carried, at once; then one emission, 3 min.
	reload(`  - {key: api_key, value: "k-*", rate_limit: {unit: hour, requests_per_unit: 20, algorithm: gcra}}` + "\n")
	decide("k-1", "k-fresh-1", 20, 14, 180_000_000)
	require.Equal(t, ok, e.call(t, "d", d("api_key", "k-1")).OverallCode, "at the retry")

	// Removed: the generic log again, on the override's 20 used, counted
	// as its 10: denied until they leave the minute.
	reload("")
	decide("k-1", "u-fresh", 10, 0, 60_000_000)
	require.Equal(t, ok, e.call(t, "d", d("api_key", "k-1")).OverallCode, "at the retry")

	// The value's own override, 2 per 30 s (a fixed window): the log's one
	// entry counts in the window holding it, one left.
	reload("  - {key: api_key, value: k-1, rate_limit: {unit: second, unit_multiplier: 30, requests_per_unit: 2}}\n" +
		"  - {key: api_key, value: k-9, rate_limit: {unit: second, unit_multiplier: 30, requests_per_unit: 2}}\n")
	decide("k-1", "k-9", 2, 1, 20_000_000)
	require.Equal(t, ok, e.call(t, "d", d("api_key", "k-1")).OverallCode, "at the retry")
}

// readmeYAML returns the i-th YAML block after heading in the file at path.
func readmeYAML(t *testing.T, path, heading string, i int) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(b), heading)
	require.True(t, ok, heading)
	var yaml string
	for range i + 1 {
		_, after, ok = strings.Cut(after, "```yaml\n")
		require.True(t, ok)
		yaml, after, ok = strings.Cut(after, "```")
		require.True(t, ok)
	}
	return yaml
}

// TestOverridesReadmeExample: the example of docs/envoy.md's "Per-value
// overrides" loads and decides as the text says, and a reload adding an
// override (of another unit than the generic limit's) carries a value's
// usage.
func TestOverridesReadmeExample(t *testing.T) {
	yaml := readmeYAML(t, "../../../docs/envoy.md", "#### Per-value overrides\n", 0)
	e := newEnv(t, yaml, envOpts{})
	// The generic limit per value, and a wildcard's, admit what they say.
	for v, want := range map[string]int{"k-1": 100, "tenant-a:u1": 1000} {
		require.Equal(t, want, e.admitted(t, want+5, "api", d("api_key", v)), v)
	}
	limitOf := func(desc ...string) uint32 {
		return e.call(t, "api", d(desc...)).Statuses[0].CurrentLimit.RequestsPerUnit
	}
	for _, c := range []struct {
		desc []string
		want uint32
	}{
		{[]string{"api_key", "k-1"}, 100},
		{[]string{"api_key", "tenant-a:u1"}, 1000},
		{[]string{"api_key", "tenant-a:batch-3"}, 5000},
		{[]string{"api_key", "k-premium"}, 10000},
		{[]string{"tenant", "acme", "user", "bob"}, 50},
		{[]string{"tenant", "acme", "user", "admin-1"}, 500},
	} {
		require.Equal(t, c.want, limitOf(c.desc...), "%v", c.desc)
	}

	// k-2 spends 60 of the generic 100 a minute; an override of 200 an
	// hour added by a reload decides the next request on that usage (the
	// minute's count in the hour holding it).
	require.Equal(t, 60, e.admitted(t, 60, "api", d("api_key", "k-2")))
	more := strings.Replace(yaml, "descriptors:\n", "descriptors:\n  - {key: api_key, value: k-2, rate_limit: {unit: hour, requests_per_unit: 200}}\n", 1)
	dom, err := ParseDomain("api.yaml", []byte(more))
	require.NoError(t, err)
	require.NoError(t, e.srv.SetConfig(&Config{Path: "api.yaml", Domains: map[string]*Domain{"api": dom}}))
	st := e.call(t, "api", d("api_key", "k-2")).Statuses[0]
	require.Equal(t, uint32(200), st.CurrentLimit.RequestsPerUnit)
	require.Equal(t, uint32(200-61), st.LimitRemaining)
}

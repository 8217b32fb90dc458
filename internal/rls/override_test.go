package rls

import (
	"errors"
	"os"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/service"
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

// TestOverridesReadmeExample: the examples of README.md's "Per-key
// overrides" (the gRPC form) and of cmd/rl-wasm-host/README.md's
// "Per-value overrides" load and decide as the text says, and a reload
// adding an override of the generic limit's unit carries a value's usage.
func TestOverridesReadmeExample(t *testing.T) {
	// The project README's shorter example (its second YAML block there).
	e := newEnv(t, readmeYAML(t, "../../README.md", "### Per-key overrides\n", 1), envOpts{})
	for v, want := range map[string]int{"tenant-a:u1": 50, "tenant-b:ops": 200, "tenant-b:u1": 10} {
		require.Equal(t, want, e.admitted(t, want+5, "api", d("user", v)), v)
	}

	yaml := readmeYAML(t, "../../cmd/rl-wasm-host/README.md", "#### Per-value overrides\n", 0)
	e = newEnv(t, yaml, envOpts{})
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

	// k-2 spends 60 of the generic 100; an override of the same unit added
	// by a reload decides the next request on that usage.
	require.Equal(t, 60, e.admitted(t, 60, "api", d("api_key", "k-2")))
	more := strings.Replace(yaml, "descriptors:\n", "descriptors:\n  - {key: api_key, value: k-2, rate_limit: {unit: minute, requests_per_unit: 200}}\n", 1)
	dom, err := ParseDomain("api.yaml", []byte(more))
	require.NoError(t, err)
	require.NoError(t, e.srv.SetConfig(&Config{Path: "api.yaml", Domains: map[string]*Domain{"api": dom}}))
	st := e.call(t, "api", d("api_key", "k-2")).Statuses[0]
	require.Equal(t, uint32(200), st.CurrentLimit.RequestsPerUnit)
	require.Equal(t, uint32(200-61), st.LimitRemaining)
}

package rls

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/frontend/service"
)

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"no domain", `descriptors: []`, `domain: missing`},
		{"unknown top field", `{domain: d, rules: []}`, `rules: unknown field`},
		{"domain with space", `domain: "a b"`, `domain: "a b": byte 1`},
		{"domain with a colon", `domain: "a:b"`, `domain: "a:b": byte 1 is ":"`}, // "rls:a:b:<key>" is also domain "a"'s key "b:<key>"
		{"no key", `{domain: d, descriptors: [{value: v}]}`, `domain "d": descriptors[0].key: missing`},
		{"empty key", `{domain: d, descriptors: [{key: ""}]}`, `descriptors[0].key: empty`},
		{"unknown descriptor field", `{domain: d, descriptors: [{key: k, limit: 3}]}`, `descriptors[0].limit: unknown field`},
		{"no unit", `{domain: d, descriptors: [{key: k, rate_limit: {requests_per_unit: 3}}]}`, `descriptors[0].rate_limit.unit: missing`},
		{"bad unit", `{domain: d, descriptors: [{key: k, rate_limit: {unit: fortnight, requests_per_unit: 3}}]}`, `rate_limit.unit: unknown unit "fortnight"`},
		{"no requests", `{domain: d, descriptors: [{key: k, rate_limit: {unit: second}}]}`, `rate_limit.requests_per_unit: missing`},
		{"negative requests", `{domain: d, descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: -1}}]}`, `requests_per_unit: -1 is outside`},
		{"unlimited with unit", `{domain: d, descriptors: [{key: k, rate_limit: {unlimited: true, unit: second}}]}`, `rate_limit.unit: must be absent when unlimited`},
		{"bad algorithm", `{domain: d, descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 3, algorithm: magic}}]}`, `rate_limit.algorithm: unknown algorithm "magic"`},
		{"log too large", `{domain: d, descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 5000, algorithm: sliding_log}}]}`, `requests_per_unit: 5000 is above 4096`},
		{"replaces itself", `{domain: d, descriptors: [{key: k, rate_limit: {name: a, replaces: [{name: a}], unit: second, requests_per_unit: 3}}]}`, `replaces[0].name: "a" is this limit's own name`},
		{"nested error", `{domain: d, descriptors: [{key: a, descriptors: [{key: b, rate_limit: {unit: second, requests_per_unit: x}}]}]}`, `descriptors[0].descriptors[0].rate_limit.requests_per_unit: want an integer`},
		{"duplicate", `{domain: d, descriptors: [{key: k, value: v}, {key: k, value: v}]}`, `descriptors[1]: a second descriptor with key "k" and value "v"`},
		{"fail_open not bool", `{domain: d, descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 3, fail_open: "yes"}}]}`, `rate_limit.fail_open: want true or false`},
		{"multiplier too long", `{domain: d, descriptors: [{key: k, rate_limit: {unit: year, unit_multiplier: 100, requests_per_unit: 3}}]}`, `rate_limit.unit_multiplier: 100 years is longer`},
		{"yaml", "domain: [", `YAML:`},
		{"float value", `{domain: d, descriptors: [{key: k, value: 30.5}]}`, `descriptors[0].value: want a string, got the number 30.5 (quote it)`},
		{"whole float value", `{domain: d, descriptors: [{key: k, value: 30.0}]}`, `descriptors[0].value: want a string, got the number 30.0 (quote it)`},
		{"list key", `{domain: d, descriptors: [{key: [k]}]}`, `descriptors[0].key: want a string, got a list (quote it)`},
		{"unknown in replaces", `{domain: d, descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 3, replaces: [{name: b, nmae: c}]}}]}`,
			`rate_limit.replaces[0].nmae: unknown field (want one of name)`},
		// Counts are strict integers, as envoyproxy/ratelimit reads them: a
		// float is refused even when whole.
		{"whole float requests", `{domain: d, descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 10.0}}]}`,
			`rate_limit.requests_per_unit: want an integer, got the number 10.0`},
		{"exponent requests", `{domain: d, descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1e3}}]}`,
			`rate_limit.requests_per_unit: want an integer, got the number 1000.0`},
		{"whole float multiplier", `{domain: d, descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 3, unit_multiplier: 2.0}}]}`,
			`rate_limit.unit_multiplier: want an integer, got the number 2.0`},
		{"exponent multiplier", `{domain: d, descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 3, unit_multiplier: 1E1}}]}`,
			`rate_limit.unit_multiplier: want an integer, got the number 10.0`},
		{"colliding keys", `{domain: d, descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 3, 2.0: 1, 2: 2}}]}`,
			`YAML: key "2" given twice in one mapping (as 2 and 2.0)`},
		{"rate_limit kind", `{domain: d, descriptors: [{key: k, rate_limit: 5}]}`, `descriptors[0].rate_limit: want a mapping {unit, requests_per_unit}, got the number 5`},
		// envoyproxy/ratelimit's fields, checked as it checks them.
		{"share_threshold without wildcard", `{domain: d, descriptors: [{key: k, value: v, share_threshold: true, rate_limit: {unit: second, requests_per_unit: 3}}]}`,
			`descriptors[0].share_threshold: only a wildcard value (with "*") has matches to share a count`},
		{"share_threshold without value", `{domain: d, descriptors: [{key: k, share_threshold: true}]}`, `descriptors[0].share_threshold: only a wildcard value`},
		{"wildcard key", `{domain: d, descriptors: [{key: "k*", rate_limit: {unit: second, requests_per_unit: 3}}]}`,
			`descriptors[0].key: "k*": a key has no wildcards (put "*" in the value)`},
		{"metadata not a mapping", `{domain: d, descriptors: [{key: k, metadata: [a], rate_limit: {unit: second, requests_per_unit: 3}}]}`,
			`descriptors[0].metadata: want a mapping, got a list`},
		{"quota_mode kind", `{domain: d, descriptors: [{key: k, quota_mode: 1}]}`, `descriptors[0].quota_mode: want true or false, got the number 1`},
		{"value_to_metric kind", `{domain: d, descriptors: [{key: k, value_to_metric: "yes"}]}`, `descriptors[0].value_to_metric: want true or false`},
		{"unlimited requests kind", `{domain: d, descriptors: [{key: k, rate_limit: {unlimited: true, requests_per_unit: x}}]}`, `rate_limit.requests_per_unit: want an integer`},
		{"unlimited multiplier", `{domain: d, descriptors: [{key: k, rate_limit: {unlimited: true, unit_multiplier: 2}}]}`, `rate_limit.unit_multiplier: must be absent when unlimited`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseDomain("x.yaml", []byte(tc.yaml))
			var ce *service.ConfigError
			require.True(t, errors.As(err, &ce), "%v", err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// Every mistake of a file is reported at once; unquoted integers and
// booleans are keys and values.
func TestConfigProblemsAtOnce(t *testing.T) {
	_, err := ParseDomain("x.yaml", []byte(`
domain: d
colour: blue
descriptors:
  - key: a
    value: 30
    shadow_mode: "no"
    rate_limit: {unit: second, requests_per_unit: 1.5}
  - key: true
    descriptors: [{key: b, rate_limit: {unit: minute, requests_per_unit: 1, unlimited: true}, extra: 1}]
`))
	var ce *service.ConfigError
	require.ErrorAs(t, err, &ce)
	var got []string
	for _, p := range ce.Problems {
		got = append(got, p.String())
	}
	require.Equal(t, []string{
		`colour: unknown field (want one of domain, descriptors)`,
		`domain "d": descriptors[0].shadow_mode: want true or false, got the string "no"`,
		`domain "d": descriptors[0].rate_limit.requests_per_unit: want an integer, got the number 1.5`,
		`domain "d": descriptors[1].descriptors[0].extra: unknown field (want one of key, value, rate_limit, descriptors, shadow_mode, quota_mode, detailed_metric, value_to_metric, share_threshold, metadata)`,
		`domain "d": descriptors[1].descriptors[0].rate_limit.unit: must be absent when unlimited is true`,
	}, got)

	dom, err := ParseDomain("x.yaml", []byte(`{domain: d, descriptors: [{key: true, value: -3, rate_limit: {unit: second, requests_per_unit: 1}}]}`))
	require.NoError(t, err)
	var paths []string
	dom.limits(func(path string, _ *Limit) { paths = append(paths, path) })
	require.Equal(t, []string{"true_-3"}, paths)
}

// Every field of envoyproxy/ratelimit's format is read: a file using all
// of them loads, each with its meaning.
func TestConfigEveryField(t *testing.T) {
	dom, err := ParseDomain("x.yaml", []byte(`
domain: d
descriptors:
  - key: route
    value: "api/*"
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        detailed_metric: true
        quota_mode: true
        shadow_mode: true
        metadata: {team: {name: edge}, tier: 2}
        rate_limit:
          name: per_method
          replaces: [{name: other}]
          unit: minute
          requests_per_unit: 60
  - key: free
    rate_limit: {unlimited: true, requests_per_unit: 0}
`))
	require.NoError(t, err)
	n := dom.match(d("route", "api/v1", "method", "GET").Entries)
	require.NotNil(t, n)
	require.Equal(t, "route_api/*.method", n.path)
	require.Equal(t, []string{"api/*"}, n.shared)
	l := n.limit
	require.True(t, l.Quota)
	require.True(t, l.Shadow)
	require.Equal(t, "per_method", l.Name)
	require.Equal(t, []string{"other"}, l.Replaces)
	require.Equal(t, "edge", l.Metadata.GetFields()["team"].GetStructValue().GetFields()["name"].GetStringValue())
	require.Equal(t, 2.0, l.Metadata.GetFields()["tier"].GetNumberValue())
	require.True(t, dom.match(d("free", "x").Entries).limit.Unlimited, "requests_per_unit is ignored under unlimited")
	require.Empty(t, dom.Extensions)
}

// A "*" anywhere in a value matches zero or more bytes; several match in
// order, apart.
func TestWildcardMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		yes, no []string
	}{
		{"value*", []string{"value", "value1", "valueXYZ"}, []string{"valu", "xvalue"}},
		{"/api/*/action", []string{"/api/123/action", "/api//action", "/api/a/b/action"}, []string{"/api/123/other", "/api/action", "/api/123/action/x"}},
		{"/api/*/resource/*/action", []string{"/api/v1/resource/123/action", "/api//resource//action"}, []string{"/api/v1/resource/action", "/api/v1/action"}},
		{"*", []string{"", "x", "*"}, nil},
		{"*x", []string{"x", "ax"}, []string{"xa", ""}},
		{"a*a", []string{"aa", "aba"}, []string{"a", "ab"}},
		{"a*b*b", []string{"abb", "abab", "axbyb"}, []string{"ab", "abxb "}},
		{"**", []string{"", "q"}, nil},
	} {
		parts := strings.Split(tc.pattern, "*")
		for _, v := range tc.yes {
			require.True(t, wildcardMatch(parts, v), "%q should match %q", tc.pattern, v)
		}
		for _, v := range tc.no {
			require.False(t, wildcardMatch(parts, v), "%q should not match %q", tc.pattern, v)
		}
	}
}

// At one level, key and value come first, then the wildcards in file
// order, then the key alone.
func TestMatchOrder(t *testing.T) {
	dom, err := ParseDomain("x.yaml", []byte(`
domain: d
descriptors:
  - {key: p, value: "/a/b", rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: p, value: "/a/*", rate_limit: {unit: second, requests_per_unit: 2}}
  - {key: p, value: "*/b", rate_limit: {unit: second, requests_per_unit: 3}}
  - {key: p, rate_limit: {unit: second, requests_per_unit: 4}}
  - {key: q, value: "x*y*z", descriptors: [{key: r, rate_limit: {unit: second, requests_per_unit: 5}}]}
`))
	require.NoError(t, err)
	for v, want := range map[string]uint32{"/a/b": 1, "/a/c/b": 2, "/x/b": 3, "/x/c": 4} {
		require.Equal(t, want, dom.match(d("p", v).Entries).limit.RequestsPerUnit, v)
	}
	require.Equal(t, uint32(5), dom.match(d("q", "x-y-z", "r", "1").Entries).limit.RequestsPerUnit)
	require.Nil(t, dom.match(d("q", "x-z-y", "r", "1").Entries))
}

func TestLoadConfigDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	write("a.yaml", `{domain: a, descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]}`)
	write("b.yml", `{domain: b, descriptors: [{key: k, value: 30, rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 2, algorithm: gcra}}]}`)
	write(".hidden.yaml", `not: a config`)
	write("notes.txt", `ignored`)
	cfg, err := LoadConfig(dir)
	require.NoError(t, err)
	require.Len(t, cfg.Domains, 2)
	var got []string
	cfg.Domains["b"].limits(func(path string, l *Limit) {
		got = append(got, path, l.Limit.Name, l.Limit.Window.String())
	})
	require.Equal(t, []string{"k_30", "default", "5m0s"}, got, "the state's name is the same whatever the unit and algorithm")
	require.Equal(t, core.DefaultLimitName(core.GCRA, 300_000_000, 1), stateName, "as rl-wasm-host names a rule's single limit")

	write("c.yaml", `{domain: a, descriptors: []}`)
	write("d.yaml", `{domain: d, descriptors: [{key: k, rate_limit: {unit: second}}]}`)
	_, err = LoadConfig(dir)
	require.Error(t, err)
	msg := err.Error()
	require.Contains(t, msg, `domain: "a" is also the domain of a.yaml`)
	require.Contains(t, msg, `: c.yaml: domain: "a" is also`)
	require.Contains(t, msg, `: d.yaml: domain "d": descriptors[0].rate_limit.requests_per_unit: missing`)
	require.Equal(t, 2, strings.Count(msg, "\n"))
}

// FuzzParseDomain: any input is a Domain or a *service.ConfigError, never
// a panic.
func FuzzParseDomain(f *testing.F) {
	f.Add([]byte(hitsYAML))
	f.Add([]byte(`{domain: d, descriptors: [{key: a, value: "v*", descriptors: [{key: b, rate_limit: {unlimited: true}}]}]}`))
	f.Add([]byte(`{domain: d, descriptors: [{key: a, value: "*x*", share_threshold: true, quota_mode: true, metadata: {m: [1, {n: true}]}, descriptors: [{key: b, value_to_metric: true, rate_limit: {unit: minute, requests_per_unit: 0}}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		dom, err := ParseDomain("f.yaml", data)
		if err != nil {
			var ce *service.ConfigError
			if !errors.As(err, &ce) || len(ce.Problems) == 0 {
				t.Fatalf("error %v is not a ConfigError with problems", err)
			}
			return
		}
		dom.limits(func(path string, l *Limit) {
			if !l.Unlimited && l.RequestsPerUnit > 0 && l.policy == nil {
				t.Fatalf("limit %s without a policy", path)
			}
		})
		var walk func(n *node, depth int)
		walk = func(n *node, depth int) {
			if len(n.shared) > depth || n.pattern != nil && len(n.pattern) < 2 {
				t.Fatalf("node %s at depth %d: shared %q, pattern %q", n.path, depth, n.shared, n.pattern)
			}
			for _, c := range n.exact {
				walk(c, depth+1)
			}
			for _, c := range n.wild {
				walk(c, depth+1)
			}
			for _, c := range n.any {
				walk(c, depth+1)
			}
		}
		walk(&dom.root, 0)
	})
}

// FuzzDescriptorKey: the key encoding is injective (two descriptors share a
// key only when their entries are equal) and printable ASCII.
func FuzzDescriptorKey(f *testing.F) {
	f.Add("a", "1|b=2", "", "")
	f.Add("a", "1", "b", "2")
	f.Add("k", "x y%", "k", "x%20y%25")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		one := d(k1, v1)
		two := d(k1, v1, k2, v2)
		if k2 == "" && v2 == "" {
			two = d(k2, v2)
		}
		a, b := descriptorKey(one.Entries, nil, 1<<20), descriptorKey(two.Entries, nil, 1<<20)
		for _, k := range []string{a, b} {
			for i := 0; i < len(k); i++ {
				if k[i] <= 0x20 || k[i] >= 0x7f {
					t.Fatalf("key %q: byte %d not printable", k, i)
				}
			}
		}
		equal := len(one.Entries) == len(two.Entries)
		for i := 0; equal && i < len(one.Entries); i++ {
			equal = one.Entries[i].Key == two.Entries[i].Key && one.Entries[i].Value == two.Entries[i].Value
		}
		if (a == b) != equal {
			t.Fatalf("%v and %v: keys %q and %q", one.Entries, two.Entries, a, b)
		}
	})
}

// FuzzSharedKey: the count shared by a wildcard's matches (share_threshold)
// has a key of its own: no descriptor's own key, its wildcard written
// literally included, equals it, and it stays printable ASCII.
func FuzzSharedKey(f *testing.F) {
	f.Add("k", "v", "v*")
	f.Add("k", "=v*", "v*")
	f.Add("k", "files/*", "files/*")
	f.Fuzz(func(t *testing.T, k, v, pattern string) {
		if pattern == "" {
			return
		}
		shared := descriptorKey(d(k, v).Entries, []string{pattern}, 1<<20)
		for i := 0; i < len(shared); i++ {
			if shared[i] <= 0x20 || shared[i] >= 0x7f {
				t.Fatalf("key %q: byte %d not printable", shared, i)
			}
		}
		require.Equal(t, shared, descriptorKey(d(k, v+"x").Entries, []string{pattern}, 1<<20), "every value shares it")
		for _, own := range []string{v, pattern, "=" + pattern} {
			if descriptorKey(d(k, own).Entries, nil, 1<<20) == shared {
				t.Fatalf("(%q, %q) has the shared key %q of %q", k, own, shared, pattern)
			}
		}
	})
}

// TestConfigAlgorithmNames: the RLS configuration accepts every name of
// every algorithm, and its message for an unknown one lists them all, from
// the one list (core.Algorithms; before, a hand-kept text that left out
// the canonical names it accepts, fixed_window and the others).
func TestConfigAlgorithmNames(t *testing.T) {
	for _, a := range core.Algorithms() {
		for _, n := range a.Names() {
			_, err := ParseDomain("x.yaml", []byte(`{domain: d, descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 3, algorithm: `+n+`}}]}`))
			require.NoError(t, err, n)
		}
	}
	_, err := ParseDomain("x.yaml", []byte(`{domain: d, descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 3, algorithm: magic}}]}`))
	require.Error(t, err)
	for _, a := range core.Algorithms() {
		require.Contains(t, err.Error(), a.String())
		require.Contains(t, err.Error(), a.ShortName())
	}
}

package rls

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/service"
)

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"no domain", `descriptors: []`, `domain: missing`},
		{"unknown top field", `{domain: d, rules: []}`, `rules: unknown field`},
		{"domain with space", `domain: "a b"`, `domain: "a b": byte 1`},
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
		`domain "d": descriptors[1].descriptors[0].extra: unknown field (want one of key, value, rate_limit, descriptors, shadow_mode, detailed_metric)`,
		`domain "d": descriptors[1].descriptors[0].rate_limit.unit: must be absent when unlimited is true`,
		`domain "d": descriptors[1].descriptors[0].rate_limit.requests_per_unit: must be absent when unlimited is true`,
	}, got)

	dom, err := ParseDomain("x.yaml", []byte(`{domain: d, descriptors: [{key: true, value: -3, rate_limit: {unit: second, requests_per_unit: 1}}]}`))
	require.NoError(t, err)
	var paths []string
	dom.limits(func(path string, _ *Limit) { paths = append(paths, path) })
	require.Equal(t, []string{"true_-3"}, paths)
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
	require.Equal(t, []string{"k_30", "gcra_5m", "5m0s"}, got)

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
		a, b := descriptorKey(one.Entries, 1<<20), descriptorKey(two.Entries, 1<<20)
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

package ruleconfig

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
)

// digest is in the form rules keep an API key in (pipeline.APIKeyDigest).
const digest = "sha256:a4ef3bba4f8e5b1a8b2b4a7c1b1c0b5e"

// TestOverridesDecode: overrides decode in file order, each with its kind,
// value and limits (a list, or the shorthand named "default"); an exact
// key and a prefix of the same text may both be given.
func TestOverridesDecode(t *testing.T) {
	for _, c := range []struct {
		name, rule string
		want       []OverrideSpec
	}{
		{"none", `"strategy": "fixed", "limit": 1, "window": "1s"`, nil},
		{"empty list", `"strategy": "fixed", "limit": 1, "window": "1s", "overrides": []`, nil},
		{"exact and prefix, list and shorthand", `"key_by": "header:X-User", "strategy": "fixed", "limit": 1, "window": "1s", "overrides": [
		    {"key": "k1", "limits": [{"name": "burst", "strategy": "token", "limit": 100, "window": "1s"}, {"strategy": "fixed", "limit": 1000, "window": "1d"}]},
		    {"key_prefix": "tenant-a:", "strategy": "fixed", "limit": 50, "window": "1s"}]`,
			[]OverrideSpec{
				{Kind: OverrideKey, Value: "k1", Limits: []NamedLimit{
					{"burst", core.Limit{Algorithm: core.TokenBucket, Limit: 100, Window: 1_000_000}, false},
					{"fixed_window_1d", core.Limit{Algorithm: core.FixedWindow, Limit: 1000, Window: 86_400_000_000}, false}}},
				{Kind: OverrideKeyPrefix, Value: "tenant-a:", Limits: []NamedLimit{{"default", core.Limit{Algorithm: core.FixedWindow, Limit: 50, Window: 1_000_000}, false}}},
			}},
		{"the same text as a key and as a prefix", `"strategy": "fixed", "limit": 1, "window": "1s", "overrides": [
		    {"key_prefix": "a", "strategy": "fixed", "limit": 2, "window": "1s"}, {"key": "a", "strategy": "fixed", "limit": 3, "window": "1s"}]`,
			[]OverrideSpec{
				{Kind: OverrideKeyPrefix, Value: "a", Limits: []NamedLimit{{"default", core.Limit{Algorithm: core.FixedWindow, Limit: 2, Window: 1_000_000}, false}}},
				{Kind: OverrideKey, Value: "a", Limits: []NamedLimit{{"default", core.Limit{Algorithm: core.FixedWindow, Limit: 3, Window: 1_000_000}, false}}},
			}},
		{"an API key's digest, in either case", `"key_by": "api_key", "strategy": "fixed", "limit": 1, "window": "1s", "overrides": [
		    {"key": "` + strings.ToUpper(digest) + `", "strategy": "gcra", "limit": 9, "window": "1m"}]`,
			[]OverrideSpec{{Kind: OverrideKey, Value: digest, Limits: []NamedLimit{{"default", core.Limit{Algorithm: core.GCRA, Limit: 9, Window: 60_000_000}, false}}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			specs, ps := parse(t, `[{"name": "r", `+c.rule+`}]`, Options{})
			require.Empty(t, ps)
			require.Equal(t, c.want, specs[0].Overrides)
		})
	}
	require.Equal(t, "key:k1", (&OverrideSpec{Kind: OverrideKey, Value: "k1"}).Label())
	require.Equal(t, "key_prefix:tenant-a:", (&OverrideSpec{Kind: OverrideKeyPrefix, Value: "tenant-a:"}).Label())
}

// TestOverridesValidation: every mistake in overrides is reported by rule
// and field, with the others, and refuses the rule.
func TestOverridesValidation(t *testing.T) {
	const lim = `"strategy": "fixed", "limit": 1, "window": "1s"`
	for _, c := range []struct {
		name, rule string
		want       []string
	}{
		{"not a list", `"overrides": {"key": "a"}`, []string{`overrides: want a list of overrides {key or key_prefix, limits}, got an object`}},
		{"not an object", `"overrides": ["a"]`, []string{`overrides[0]: want an object {key or key_prefix, limits}, got the string "a"`}},
		{"unknown field", `"overrides": [{"key": "a", "limit": 2, "window": "1s", "strategy": "fixed", "burst": 3}]`,
			[]string{`overrides[0].burst: unknown field (want one of key, key_prefix, strategy, algorithm, limit, window, rate, shadow, limits)`}},
		{"repeated field", `"overrides": [{"key": "a", "key": "b", ` + lim + `}]`, []string{`JSON: line 1: key "key" given twice in one object`}},
		{"neither key nor prefix", `"overrides": [{` + lim + `}]`,
			[]string{`overrides[0].key: missing: give key (one key) or key_prefix (every key starting with it)`}},
		{"both key and prefix", `"overrides": [{"key": "a", "key_prefix": "a", ` + lim + `}]`,
			[]string{`overrides[0].key_prefix: give key or key_prefix, not both (an override applies to one key, or to the keys starting with a prefix)`}},
		{"no limits", `"overrides": [{"key": "a"}]`,
			[]string{`overrides[0].limits: missing: an override replaces the rule's limits for its keys (give limits, or strategy/limit/window/rate)`}},
		{"limits and shorthand", `"overrides": [{"key": "a", "limit": 3, "limits": [{` + lim + `}]}]`,
			[]string{`overrides[0].limits: give either limits or strategy/limit/window/rate, not both`}},
		{"bad limits", `"overrides": [{"key": "a", "limits": [{"strategy": "fixed", "limit": 0, "window": "1s"}, {"strategy": "fixed", "limit": 1, "window": "1s"}, {"strategy": "fixed", "limit": 2, "window": "1s"}]}, {"key": "b", "limits": []}]`,
			[]string{`overrides[0].limits[0].limit: 0 is outside [1, 1099511627776] for fixed_window`,
				`overrides[0].limits[2].name: "fixed_window_1s" names two limits of the rule`,
				`overrides[1].limits: 0 limits, want 1 to 16`}},
		{"bad shorthand", `"overrides": [{"key_prefix": "a", "strategy": "tokn", "limit": 1, "window": "1s"}]`,
			[]string{`overrides[0].strategy: unknown strategy "tokn" (want one of ` + Strategies + `)`}},
		{"key of the wrong kind", `"overrides": [{"key": 5, ` + lim + `}]`, []string{`overrides[0].key: want a string, got the number 5`}},
		{"empty key", `"overrides": [{"key_prefix": "", ` + lim + `}]`, []string{`overrides[0].key_prefix: want 1 to 256 bytes, got 0`}},
		{"too long", `"overrides": [{"key": "` + strings.Repeat("k", 257) + `", ` + lim + `}]`, []string{`overrides[0].key: want 1 to 256 bytes, got 257`}},
		{"a space", `"overrides": [{"key": "a b", ` + lim + `}]`,
			[]string{`overrides[0].key: "a b": byte 1 is not printable ASCII (or is a space): no key could match it`}},
		{"the same key twice", `"overrides": [{"key": "a", ` + lim + `}, {"key_prefix": "a", ` + lim + `}, {"key": "a", ` + lim + `}, {"key_prefix": "a", ` + lim + `}]`,
			[]string{`overrides[2].key: "a" is also the key of overrides[0]`, `overrides[3].key_prefix: "a" is also the key_prefix of overrides[1]`}},
		{"key_by: global", `"key_by": "global", "overrides": [{"key": "global", ` + lim + `}]`,
			[]string{`overrides: key_by: global has one key for every request: change the rule's limits instead`}},
		{"an API key itself, never echoed", `"key_by": "api_key:X-API-Key", "overrides": [{"key": "secret-key-1", ` + lim + `}, {"key": "sha256:0123", ` + lim + `}]`,
			[]string{`overrides[0].key: key_by: api_key keeps each API key as its digest, and so must an override (never the key itself, a secret): "sha256:" and the first 32 hex digits of its SHA-256 (printf %s "$KEY" | sha256sum | cut -c1-32)`,
				`overrides[1].key: key_by: api_key keeps each API key as its digest, and so must an override (never the key itself, a secret): "sha256:" and the first 32 hex digits of its SHA-256 (printf %s "$KEY" | sha256sum | cut -c1-32)`}},
		{"a prefix of API keys", `"key_by": "api_key", "overrides": [{"key_prefix": "sha256:00", ` + lim + `}]`,
			[]string{`overrides[0].key_prefix: key_by: api_key keeps each API key as its digest, and a prefix of a digest selects no set of keys: list the keys (key: their digests)`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rule := `"name": "r", ` + lim + `, ` + c.rule
			var want []string
			for _, w := range c.want {
				if !strings.HasPrefix(w, "JSON: ") { // a document's problem names no rule
					w = `rules[0] "r": ` + w
				}
				want = append(want, w)
			}
			specs, ps := parse(t, `[{`+rule+`}]`, Options{})
			require.Equal(t, want, texts(ps))
			require.Empty(t, specs, "a rule with a problem is not returned")
			for _, p := range ps {
				require.NotContains(t, p.Message, "secret-key-1")
			}
		})
	}
}

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
// value and limits (a list, or the shorthand, named after the rule); an exact
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
				{Kind: OverrideKeyPrefix, Value: "tenant-a:", Limits: []NamedLimit{{"r", core.Limit{Algorithm: core.FixedWindow, Limit: 50, Window: 1_000_000}, false}}},
			}},
		{"the same text as a key and as a prefix", `"strategy": "fixed", "limit": 1, "window": "1s", "overrides": [
		    {"key_prefix": "a", "strategy": "fixed", "limit": 2, "window": "1s"}, {"key": "a", "strategy": "fixed", "limit": 3, "window": "1s"}]`,
			[]OverrideSpec{
				{Kind: OverrideKeyPrefix, Value: "a", Limits: []NamedLimit{{"r", core.Limit{Algorithm: core.FixedWindow, Limit: 2, Window: 1_000_000}, false}}},
				{Kind: OverrideKey, Value: "a", Limits: []NamedLimit{{"r", core.Limit{Algorithm: core.FixedWindow, Limit: 3, Window: 1_000_000}, false}}},
			}},
		{"an API key's digest, in either case", `"key_by": "api_key", "strategy": "fixed", "limit": 1, "window": "1s", "overrides": [
		    {"key": "` + strings.ToUpper(digest) + `", "strategy": "gcra", "limit": 9, "window": "1m"}]`,
			[]OverrideSpec{{Kind: OverrideKey, Value: digest, Limits: []NamedLimit{{"r", core.Limit{Algorithm: core.GCRA, Limit: 9, Window: 60_000_000}, false}}}}},
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
			[]string{`overrides[0].limits[0]: limit 0: outside [1, 1099511627776] for fixed_window`,
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

// TestIPOverrides (review of issue 22): under key_by: ip an override's
// key_prefix is a CIDR prefix, kept as its network (matched by
// containment, pipeline.Overrides), and a key is one client's key as
// pipeline.IPKey writes it; text prefixes, which matched 192.168.100.7
// for "192.168.1" and no IPv6 key for "2001:db8:0:", are refused with a
// CIDR suggested, and so are prefixes longer than the keys.
func TestIPOverrides(t *testing.T) {
	const lim = `"strategy": "fixed", "limit": 1, "window": "1s"`
	rule := func(os ...string) string {
		var b strings.Builder
		for i, o := range os {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(`{` + o + `, ` + lim + `}`)
		}
		return `[{"name": "r", "key_by": "ip", ` + lim + `, "overrides": [` + b.String() + `]}]`
	}
	t.Run("accepted", func(t *testing.T) {
		for _, c := range []struct {
			opt        Options
			in         string
			kind       OverrideKind
			value, net string
		}{
			{Options{}, `"key_prefix": "10.0.0.0/8"`, OverrideKeyPrefix, "10.0.0.0/8", "10.0.0.0/8"},
			{Options{}, `"key_prefix": "192.0.2.7/32"`, OverrideKeyPrefix, "192.0.2.7/32", "192.0.2.7/32"},
			{Options{}, `"key_prefix": "2001:DB8::/32"`, OverrideKeyPrefix, "2001:db8::/32", "2001:db8::/32"},
			{Options{}, `"key_prefix": "2001:db8:1:2::/64"`, OverrideKeyPrefix, "2001:db8:1:2::/64", "2001:db8:1:2::/64"},
			{Options{}, `"key_prefix": "::/0"`, OverrideKeyPrefix, "::/0", "::/0"},
			{Options{}, `"key": "192.0.2.7"`, OverrideKey, "192.0.2.7", ""},
			{Options{}, `"key": "192.0.2.7/32"`, OverrideKey, "192.0.2.7", ""},
			{Options{}, `"key": "2001:DB8:1:2:0::/64"`, OverrideKey, "2001:db8:1:2::/64", ""},
			{Options{IPv4Prefix: 24}, `"key": "192.0.2.0/24"`, OverrideKey, "192.0.2.0/24", ""},
			{Options{IPv6Prefix: 128}, `"key": "2001:db8::1"`, OverrideKey, "2001:db8::1", ""},
			{Options{IPv6Prefix: 128}, `"key_prefix": "2001:db8::/96"`, OverrideKeyPrefix, "2001:db8::/96", "2001:db8::/96"},
		} {
			specs, ps := parse(t, rule(c.in), c.opt)
			require.Empty(t, ps, c.in)
			o := specs[0].Overrides[0]
			require.Equal(t, c.kind, o.Kind, c.in)
			require.Equal(t, c.value, o.Value, c.in)
			if c.net == "" {
				require.False(t, o.Net.IsValid(), c.in)
			} else {
				require.Equal(t, c.net, o.Net.String(), c.in)
			}
		}
	})
	t.Run("refused", func(t *testing.T) {
		for _, c := range []struct {
			opt  Options
			in   string
			want string // in the message
		}{
			{Options{}, `"key_prefix": "192.168.1"`, `"192.168.1" is not a CIDR prefix: key_by: ip matches networks, not text`},
			{Options{}, `"key_prefix": "192.168.1."`, `write a CIDR prefix such as "192.168.1.0/24"`},
			{Options{}, `"key_prefix": "10."`, `write a CIDR prefix such as "10.0.0.0/8"`},
			{Options{}, `"key_prefix": "2001:db8:0:"`, `write a CIDR prefix such as "10.0.0.0/8" or "2001:db8::/32"`},
			{Options{}, `"key_prefix": "tenant-a:"`, `"tenant-a:" is not a CIDR prefix`},
			{Options{}, `"key_prefix": "192.168.1.1"`, `"192.168.1.1" is an address, not a CIDR prefix (key_by: ip matches networks, not text): write "192.168.1.1/32", or give the client as key`},
			{Options{}, `"key_prefix": "2001:db8::1"`, `write "2001:db8::/64"`},
			{Options{}, `"key_prefix": "10.0.0.1/8"`, `"10.0.0.1/8" has bits set past its length: write the network "10.0.0.0/8"`},
			{Options{}, `"key_prefix": "2001:db8::/96"`,
				`IPv6 clients are keyed by their /64 (ipv6_prefix), so each key is a whole /64 and a /96 contains none: use a prefix of /64 or shorter ("2001:db8::/64")`},
			{Options{IPv4Prefix: 24}, `"key_prefix": "192.0.2.0/28"`, `IPv4 clients are keyed by their /24 (ipv4_prefix)`},
			{Options{}, `"key_prefix": "::ffff:10.0.0.0/104"`, `is an IPv4-mapped IPv6 address: clients reaching the front end this way are keyed by their IPv4 address; write "10.0.0.0/8"`},
			{Options{}, `"key_prefix": "fe80::/10%eth0"`, `is not a CIDR prefix`},
			{Options{}, `"key": "fe80::1%eth0"`, `"fe80::1%eth0" is not an IP address`},
			{Options{}, `"key": "alice"`, `"alice" is not an IP address`},
			{Options{}, `"key": "2001:db8:1:2::7"`, `IPv6 clients are keyed by their /64 (ipv6_prefix), so no key is "2001:db8:1:2::7": write key "2001:db8:1:2::/64" (its /64), or a key_prefix`},
			{Options{}, `"key": "10.0.0.0/8"`, `"10.0.0.0/8" is a network of many clients, and IPv4 clients are keyed by their /32 (ipv4_prefix): give it as key_prefix`},
			{Options{IPv4Prefix: 24}, `"key": "192.0.2.7"`, `write key "192.0.2.0/24" (its /24)`},
		} {
			_, ps := parse(t, rule(c.in), c.opt)
			require.Len(t, ps, 1, c.in)
			require.Contains(t, ps[0].String(), c.want, c.in)
		}
	})
	t.Run("the default key_by", func(t *testing.T) {
		// A rule that matches requests keys by ip unless it says
		// otherwise: its overrides are networks.
		_, ps := parse(t, `[{"endpoint": "/x", `+lim+`, "overrides": [{"key_prefix": "10.", `+lim+`}]}]`, Options{})
		require.Len(t, ps, 1)
		require.Contains(t, ps[0].String(), `"10." is not a CIDR prefix`)
		_, ps = parse(t, `[{"name": "x", `+lim+`, "overrides": [{"key_prefix": "10.", `+lim+`}]}]`, Options{Proxied: true})
		require.Len(t, ps, 1)
		// A rule of the decision API only that names no key source
		// derives no key: its callers' keys are text.
		specs, ps := parse(t, `[{"name": "x", `+lim+`, "overrides": [{"key_prefix": "10.", `+lim+`}]}]`, Options{})
		require.Empty(t, ps)
		require.Equal(t, "10.", specs[0].Overrides[0].Value)
		require.False(t, specs[0].Overrides[0].Net.IsValid())
	})
	t.Run("duplicates are found in canonical form", func(t *testing.T) {
		_, ps := parse(t, rule(`"key_prefix": "2001:db8::/32"`, `"key_prefix": "2001:DB8:0::/32"`), Options{})
		require.Equal(t, []string{`rules[0] "r": overrides[1].key_prefix: "2001:db8::/32" is also the key_prefix of overrides[0]`}, texts(ps))
	})
}

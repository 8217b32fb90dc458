package pipeline

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/ruleconfig"
	"github.com/rlcore/rl/memstore"
)

// TestOverridesMatch: the most specific override applies, whatever the
// configuration's order: an exact key, else the longest prefix the key
// starts with (itself included), else none.
func TestOverridesMatch(t *testing.T) {
	key := func(v string) ruleconfig.OverrideSpec {
		return ruleconfig.OverrideSpec{Kind: ruleconfig.OverrideKey, Value: v}
	}
	prefix := func(v string) ruleconfig.OverrideSpec {
		return ruleconfig.OverrideSpec{Kind: ruleconfig.OverrideKeyPrefix, Value: v}
	}
	os := []ruleconfig.OverrideSpec{prefix("t-"), key("t-a1"), prefix("t-a"), prefix("u"), key("t-"), prefix("t-a1x")}
	o := NewOverrides(os)
	require.Equal(t, 6, o.Len())
	for _, c := range []struct {
		key  string
		want int
	}{
		{"t-b", 0},    // the one prefix
		{"t-a1", 1},   // exact, before the prefixes t-a and t-
		{"t-a2", 2},   // the longer prefix, though listed after the shorter
		{"t-a", 2},    // a prefix matches the key equal to it
		{"t-", 4},     // exact before the prefix of the same text
		{"t-a1xy", 5}, // the longest of three prefixes
		{"t-a1y", 2},
		{"u", 3},
		{"uv", 3},
		{"t", -1},
		{"x", -1},
		{"", -1},
	} {
		require.Equal(t, c.want, o.Match(c.key), c.key)
	}
	var none Overrides
	require.Equal(t, -1, none.Match("t-a1"))
	require.Zero(t, none.Len())

	i, why := o.Explain("t-a1", os)
	require.Equal(t, 1, i)
	require.Equal(t, []string{"the key is the override's key (an exact key comes before every prefix)",
		`not chosen: key_prefix "t-" matches too, but an exact key comes first`,
		`not chosen: key_prefix "t-a" matches too, but an exact key comes first`}, why)
	i, why = o.Explain("t-a2", os)
	require.Equal(t, 2, i)
	require.Equal(t, []string{`the key starts with the override's key_prefix "t-a", and no override names the key itself`,
		`not chosen: key_prefix "t-" matches too, but is shorter (a longer prefix comes first)`}, why)
	i, why = o.Explain("x", os)
	require.Equal(t, -1, i)
	require.Equal(t, []string{"no override of the rule applies to the key: the rule's limits decide"}, why)
}

// Matching allocates nothing: it runs on every decision of a rule with
// overrides.
func TestOverridesMatchAllocs(t *testing.T) {
	o := NewOverrides([]ruleconfig.OverrideSpec{{Kind: ruleconfig.OverrideKeyPrefix, Value: "tenant-a:"},
		{Kind: ruleconfig.OverrideKey, Value: "k1"}, {Kind: ruleconfig.OverrideKeyPrefix, Value: "tenant-"}})
	key := "tenant-a:user-42"
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = o.Match(key) }))
}

// TestOverridesMatchNetworks (review of issue 22): the key_prefixes of a
// rule keyed by ip are networks, matched by containment, the longest
// first: never as text, where "192.168.1" selected 192.168.100.7 and
// "2001:db8:0:" no IPv6 key (written 2001:db8::/64). An IPv6 key is the
// client's /64: a network of /64 or shorter that contains it matches.
func TestOverridesMatchNetworks(t *testing.T) {
	net := func(v string) ruleconfig.OverrideSpec {
		p := netip.MustParsePrefix(v)
		return ruleconfig.OverrideSpec{Kind: ruleconfig.OverrideKeyPrefix, Value: p.String(), Net: p}
	}
	key := func(v string) ruleconfig.OverrideSpec {
		return ruleconfig.OverrideSpec{Kind: ruleconfig.OverrideKey, Value: v}
	}
	os := []ruleconfig.OverrideSpec{net("192.168.1.0/24"), net("10.0.0.0/8"), net("10.1.0.0/16"), net("2001:db8::/32"),
		net("2001:db8:1:2::/64"), key("10.1.2.3"), key("2001:db8:7::/64"), net("0.0.0.0/0")}
	o := NewOverrides(os)
	for _, c := range []struct {
		key  string
		want int
	}{
		{"192.168.1.7", 0},
		{"192.168.100.7", 7}, // not in 192.168.1.0/24: only the default route
		{"192.168.1.0/24", 0},
		{"192.168.0.0/16", 7}, // a network wider than the override is not within it
		{"10.9.9.9", 1},
		{"10.1.9.9", 2}, // the longer prefix, though listed after
		{"10.1.2.3", 5}, // exact before every network
		{"2001:db8:1:2::/64", 4},
		{"2001:db8:1:3::/64", 3},
		{"2001:db8:7::/64", 6},
		{"2001:db8:1:2::9", 4}, // an address (a decision-API key) is within its networks
		{"2001:db9::/64", -1},
		{"::ffff:10.9.9.9", 1}, // IPv4-mapped: IPv4, as IPKey writes it
		{"fe80::1%eth0", -1},
		{"192.168.1", -1}, // not an address: no network holds it
		{"", -1},
		{"x/8", -1},
	} {
		require.Equal(t, c.want, o.Match(c.key), c.key)
	}
	// Keys as IPKey writes them, with the default prefix lengths.
	for _, c := range []struct {
		peer string
		want int
	}{
		{"192.168.1.200:1", 0},
		{"192.168.100.7:1", 7},
		{"[2001:db8:1:2:aaaa::1]:1", 4},
		{"[2001:db8:0:9::1]:1", 3},
	} {
		k, ok := IPKey{}.Key(c.peer, nil)
		require.True(t, ok)
		require.Equal(t, c.want, o.Match(k), c.peer)
	}

	i, why := o.Explain("10.1.9.9", os)
	require.Equal(t, 2, i)
	require.Equal(t, []string{`the key's network is within the override's key_prefix "10.1.0.0/16", and no override names the key itself`,
		`not chosen: key_prefix "10.0.0.0/8" matches too, but is shorter (a longer prefix comes first)`,
		`not chosen: key_prefix "0.0.0.0/0" matches too, but is shorter (a longer prefix comes first)`}, why)
	i, why = o.Explain("10.1.2.3", os)
	require.Equal(t, 5, i)
	require.Len(t, why, 4) // the key, and three networks holding it
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = o.Match("2001:db8:1:3::/64") }))
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = o.Match("192.168.100.7") }))
}

// TestStoredKeyProblem: the filter refuses, for a global.rule, exactly
// the keys rl-wasm-host's limiter refuses under that rule's name.
func TestStoredKeyProblem(t *testing.T) {
	require.Equal(t, rl.DefaultMaxKeyLength, MaxStoredKey)
	mem := memstore.New(nil)
	defer mem.Close()
	lim, err := rl.New(rl.Config{Store: mem, Policy: rl.MustPolicy(rl.Limit{Algorithm: core.FixedWindow, Limit: 1, Window: time.Second}), BaseKey: "api"})
	require.NoError(t, err)
	for _, k := range []string{"", "a", strings.Repeat("k", 252), strings.Repeat("k", 253), "a b", "a\x7f", "é", "bot-7:x"} {
		require.Equal(t, lim.CheckKey(k) == nil, StoredKeyProblem("api", k) == "", "%q", k)
	}
	require.Equal(t, `253 bytes (257 with the rule's name "api"), longer than 256`, StoredKeyProblem("api", strings.Repeat("k", 253)))
}

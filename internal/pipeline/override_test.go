package pipeline

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/ruleconfig"
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

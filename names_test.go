package rl_test

import (
	"fmt"
	"go/build"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/ruleconfig"
)

// A limit's default name is a state row's key: a Go app's policy
// (rl.NewPolicy) and a configuration's rules (ruleconfig.CheckLimits, used
// by rl-wasm-host, its decision API and the proxy-wasm filter) must give an
// unnamed limit among several the same one, for every algorithm and many
// windows. Some names are pinned, so that neither side can change them
// unnoticed. A rule's one unnamed limit is named after the rule
// (ruleconfig.LoneLimitName), where a Go app's is "default": an app
// sharing a rule's state names its limit so.
func TestDefaultLimitNamesAgree(t *testing.T) {
	windows := []time.Duration{time.Microsecond, 999 * time.Microsecond, time.Millisecond, 1500 * time.Microsecond,
		time.Second, 90 * time.Second, time.Minute, 61 * time.Minute, time.Hour, 25 * time.Hour, 24 * time.Hour,
		7 * 24 * time.Hour, time.Duration(core.MaxWindow) * time.Microsecond}
	for us := int64(1); us <= core.MaxWindow; us = us*7 + 3 {
		windows = append(windows, time.Duration(us)*time.Microsecond)
	}
	for _, w := range windows {
		for _, a := range core.Algorithms() {
			other := rl.Limit{Algorithm: core.GCRA, Limit: 1, Window: w}
			if a == core.GCRA {
				other.Algorithm = core.FixedWindow
			}
			p, err := rl.NewPolicy(rl.Limit{Algorithm: a, Limit: 1, Window: w}, other)
			require.NoError(t, err, w)
			c := &ruleconfig.Checker{}
			win := ruleconfig.String{V: rl.FormatWindow(w), Set: true}
			ls := []ruleconfig.Limit{
				{Fields: ruleconfig.Fields{Set: true}, LimitFields: ruleconfig.LimitFields{
					Strategy: ruleconfig.String{V: a.String(), Set: true}, Limit: ruleconfig.Int{V: 1, Set: true}, Window: win}},
				{Fields: ruleconfig.Fields{Set: true}, LimitFields: ruleconfig.LimitFields{
					Strategy: ruleconfig.String{V: other.Algorithm.String(), Set: true}, Limit: ruleconfig.Int{V: 1, Set: true}, Window: win}},
			}
			out, ok := ruleconfig.CheckLimits(c, "limits", ls, "rule")
			require.True(t, ok, "%v", c.Problems)
			want := p.Limits()
			require.Equal(t, want[0].Name, out[0].Name, w)
			require.Equal(t, want[1].Name, out[1].Name, w)
			require.Equal(t, fmt.Sprintf("%s_%s", a, rl.FormatWindow(w)), want[0].Name)
		}
	}
	for w, name := range map[time.Duration]string{
		time.Microsecond: "fixed_window_1µs", 1500 * time.Microsecond: "fixed_window_1.5ms", time.Second: "fixed_window_1s",
		90 * time.Second: "fixed_window_1m30s", time.Minute: "fixed_window_1m", 61 * time.Minute: "fixed_window_61m",
		time.Hour: "fixed_window_1h", 25 * time.Hour: "fixed_window_25h", 48 * time.Hour: "fixed_window_2d",
	} {
		require.Equal(t, name, rl.DefaultLimitName(rl.Limit{Algorithm: core.FixedWindow, Window: w}, 2))
		require.Equal(t, name, core.DefaultLimitName(core.FixedWindow, int64(w/time.Microsecond), 3))
	}
	require.Equal(t, "default", rl.DefaultLimitName(rl.Limit{Algorithm: core.GCRA, Window: time.Second}, 1))
	one := []ruleconfig.Limit{{Fields: ruleconfig.Fields{Set: true}, LimitFields: ruleconfig.LimitFields{
		Strategy: ruleconfig.String{V: "gcra", Set: true}, Limit: ruleconfig.Int{V: 1, Set: true}, Window: ruleconfig.String{V: "1s", Set: true}}}}
	for alone, want := range map[string]string{"": "default", "search": "search"} {
		out, ok := ruleconfig.CheckLimits(&ruleconfig.Checker{}, "limits", one, alone)
		require.True(t, ok)
		require.Equal(t, want, out[0].Name, "a lone limit given %q", alone)
	}
}

// TestRootImports: the root package (the Go API) sits below the front ends'
// configuration: the default limit names and the window format it shares
// with them live in core, so it imports no front-end package (it imported
// internal/request/ruleconfig for them).
func TestRootImports(t *testing.T) {
	pkg, err := build.Default.ImportDir(".", 0)
	require.NoError(t, err)
	for _, imp := range pkg.Imports {
		for _, above := range []string{"internal/request/ruleconfig", "internal/request/pipeline", "internal/request/outage", "internal/frontend/service", "internal/frontend/rls", "httplimit"} {
			require.NotEqual(t, "github.com/rlcore/rl/"+above, imp, "the root package imports %s", imp)
		}
	}
}

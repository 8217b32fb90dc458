package service

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// carryCases are limits changed by a reload, for every algorithm: raised
// (an exhausted key gets what is left at once) and lowered (never more
// than the new limit, counting the usage carried), with the next
// request's exact retry after the change, in µs, which is what the new
// limit alone gives a key exhausted then. The clock is 10 s into a minute.
var carryCases = []struct {
	name, before, after string
	used                int   // requests admitted under before
	more                int   // then admitted under after, at the same instant
	retry               int64 // of the next one
}{
	{"fixed raised", "strategy: fixed, limit: 3, window: 1m", "strategy: fixed, limit: 6, window: 1m", 3, 3, 50_000_000},
	{"fixed lowered", "strategy: fixed, limit: 8, window: 1m", "strategy: fixed, limit: 4, window: 1m", 5, 0, 50_000_000},
	{"sliding raised", "strategy: sliding, limit: 3, window: 1m", "strategy: sliding, limit: 6, window: 1m", 3, 3, 60_000_000},
	{"sliding lowered", "strategy: sliding, limit: 8, window: 1m", "strategy: sliding, limit: 4, window: 1m", 5, 0, 65_000_000},
	{"log raised", "strategy: log, limit: 3, window: 1m", "strategy: log, limit: 6, window: 1m", 3, 3, 60_000_000},
	{"log lowered", "strategy: log, limit: 8, window: 1m", "strategy: log, limit: 4, window: 1m", 5, 0, 60_000_000},
	{"token raised", "strategy: token, limit: 3, window: 1s", "strategy: token, limit: 6, window: 1s", 3, 3, 166_667},
	{"token lowered", "strategy: token, limit: 8, window: 1s", "strategy: token, limit: 4, window: 1s", 5, 0, 250_000},
	{"leaky raised", "strategy: leaky, limit: 3, window: 1s", "strategy: leaky, limit: 6, window: 1s", 3, 3, 166_667},
	{"leaky lowered", "strategy: leaky, limit: 8, window: 1s", "strategy: leaky, limit: 4, window: 1s", 5, 0, 250_000},
	{"gcra raised", "strategy: gcra, limit: 3, window: 1s", "strategy: gcra, limit: 6, window: 1s", 3, 3, 166_667},
	{"gcra lowered", "strategy: gcra, limit: 8, window: 1s", "strategy: gcra, limit: 4, window: 1s", 5, 0, 250_000},
	// Another algorithm takes the units used at the state's own time:
	// a window's start (now, for a window of 1 s), a bucket's last update.
	{"window to bucket", "strategy: fixed, limit: 5, window: 1s", "strategy: gcra, limit: 2, window: 1s", 5, 0, 500_000},
	{"bucket to log", "strategy: token, limit: 10, window: 1m", "strategy: log, limit: 4, window: 1m", 7, 0, 60_000_000},
}

// TestReloadCarriesUsage (issue 22, item 1): a configuration reload (what
// SIGHUP runs) that changes a rule's limit decides each key, through the
// decision API and the proxy alike, on the usage it carries: raised, an
// exhausted key gets what is left at once; lowered, never more than the
// new limit counting the usage carried, denied with an exact retry no
// longer than the new limit alone gives; a change of algorithm converts
// the units used.
func TestReloadCarriesUsage(t *testing.T) {
	for _, c := range carryCases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "rules.yaml")
			reload := func(e *env, limit string) {
				t.Helper()
				require.NoError(t, os.WriteFile(path, []byte("upstream: demo\nrules:\n  - {name: r, endpoint: /, key_by: \"header:X-User\", "+limit+"}\n"), 0o600))
				require.NoError(t, e.svc.Reload(path))
			}
			e := newEnv(t, `rules: [{name: r, strategy: fixed, limit: 1, window: 1s}]`, nil)
			reload(e, c.before)
			// Alternately the decision API and the proxy, on one key.
			step := 0
			check := func(user string) (int, DecisionJSON) {
				t.Helper()
				step++
				if step%2 == 0 {
					r := e.do(t, "GET", "/x", "", "X-User", user)
					return r.code, DecisionJSON{}
				}
				r := e.post(t, "check", `{"rule":"r","key":"`+user+`"}`)
				return r.code, r.decision(t)
			}
			for i := range c.used {
				code, _ := check("k")
				require.Equal(t, 200, code, "request %d under the old limit", i)
			}
			reload(e, c.after)
			for i := range c.more {
				code, _ := check("k")
				require.Equal(t, 200, code, "request %d under the new limit: what is left, at once", i)
			}
			r := e.post(t, "check", `{"rule":"r","key":"k"}`)
			require.Equal(t, 429, r.code, "beyond the new limit, counting the usage carried")
			d := r.decision(t)
			require.Equal(t, (c.retry+999)/1000, d.RetryAfterMS)
			p := e.do(t, "GET", "/x", "", "X-User", "k")
			require.Equal(t, 429, p.code)
			require.Equal(t, d.RetryAfter, mustInt(t, p.h.Get("Retry-After")), "the proxy says the same")

			// The new limit alone: a fresh key exhausted now waits no less.
			var alone DecisionJSON
			for range 20 {
				if r := e.post(t, "check", `{"rule":"r","key":"fresh"}`); r.code == 429 {
					alone = r.decision(t)
					break
				}
			}
			require.LessOrEqual(t, d.RetryAfterMS, alone.RetryAfterMS, "no longer than the new limit alone gives")

			e.now.Add(c.retry - 1)
			require.Equal(t, 429, e.post(t, "check", `{"rule":"r","key":"k"}`).code, "1 µs before the retry")
			e.now.Add(1)
			require.Equal(t, 200, e.do(t, "GET", "/x", "", "X-User", "k").code, "at the retry")
		})
	}
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	for _, c := range []byte(s) {
		require.True(t, c >= '0' && c <= '9', "%q", s)
		n = n*10 + int64(c-'0')
	}
	return n
}

// TestOverrideChangeCarriesUsage (issue 22, items 1 and 4): a key that
// starts or stops matching an override of the same limit names changes
// its limit's parameters, and carries its usage across like any changed
// limit: a raised override admits what is left at once, a lowered one
// (the rule's limit coming back) never more than itself counting the
// usage carried, with an exact retry. GCRA and a sliding log, the prefix
// form and the exact one.
func TestOverrideChangeCarriesUsage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	e := newEnv(t, `rules: [{name: r, strategy: fixed, limit: 1, window: 1s}]`, nil)
	reload := func(overrides string) {
		t.Helper()
		require.NoError(t, os.WriteFile(path, []byte(`rules:
  - name: r
    limits: [{name: burst, strategy: gcra, limit: 2, window: 1s}, {name: minute, strategy: log, limit: 10, window: 1m}]
    overrides: [`+overrides+`]
`), 0o600))
		require.NoError(t, e.svc.Reload(path))
	}
	check := func(key string) (int, DecisionJSON) {
		t.Helper()
		r := e.post(t, "check", `{"rule":"r","key":"`+key+`"}`)
		return r.code, r.decision(t)
	}
	reload("")
	for range 2 {
		code, _ := check("vip:1")
		require.Equal(t, 200, code)
	}
	code, d := check("vip:1")
	require.Equal(t, 429, code)
	require.Equal(t, "burst", d.LimitName)

	// A prefix override of the same names raises both: what is left of
	// the burst at once.
	reload(`{key_prefix: "vip:", limits: [{name: burst, strategy: gcra, limit: 6, window: 1s}, {name: minute, strategy: log, limit: 8, window: 1m}]}`)
	for i := range 4 {
		code, d = check("vip:1")
		require.Equal(t, 200, code, "request %d: 6 less the 2 carried", i)
		require.Equal(t, "key_prefix:vip:", d.Override)
	}
	code, d = check("vip:1")
	require.Equal(t, 429, code)
	require.Equal(t, "burst", d.LimitName)
	require.Equal(t, int64(167), d.RetryAfterMS, "one emission of 6 a second, 166667 µs")

	// The key stops matching it (the override now names one key): the
	// rule's limits again, on the 6 used: the burst of 2 is full, and the
	// minute's log holds 6 of 10.
	reload(`{key: "vip:2", limits: [{name: burst, strategy: gcra, limit: 6, window: 1s}, {name: minute, strategy: log, limit: 8, window: 1m}]}`)
	code, d = check("vip:1")
	require.Equal(t, 429, code, "never more than the rule's burst, counting the usage carried")
	require.Empty(t, d.Override)
	require.Equal(t, "burst", d.LimitName)
	require.Equal(t, int64(500), d.RetryAfterMS, "what the rule's burst alone gives: one emission of 2 a second")
	e.now.Add(500_000 - 1)
	code, _ = check("vip:1")
	require.Equal(t, 429, code, "1 µs early")
	e.now.Add(1)
	code, d = check("vip:1")
	require.Equal(t, 200, code)
	require.Equal(t, int64(3), d.Limits[1].Remaining, "the minute's log carried 6 of its entries: 10 - 7")

	// The exact key of an override lowering the log: 7 used, 3 allowed:
	// denied by the log until its oldest entries leave the minute.
	reload(`{key: "vip:1", limits: [{name: burst, strategy: gcra, limit: 6, window: 1s}, {name: minute, strategy: log, limit: 3, window: 1m}]}`)
	e.now.Add(1_000_000)
	code, d = check("vip:1")
	require.Equal(t, 429, code, "never more than the lowered log, counting the usage carried")
	require.Equal(t, "key:vip:1", d.Override)
	require.Equal(t, "minute", d.LimitName)
	require.Equal(t, int64(58_500), d.RetryAfterMS, "the 5th oldest of the 7 entries (taken 1.5 s ago) leaves the minute")
}

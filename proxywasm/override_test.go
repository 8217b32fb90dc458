package main

import (
	"encoding/json"
	"testing"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/rlcore/rl/core"
)

// TestFilterOverrides: the filter decides a key by its rule's most
// specific override, whatever the order of the configuration: an exact key,
// else the longest prefix, else the rule's limits; the fields list the
// override's limits.
func TestFilterOverrides(t *testing.T) {
	host := emulate(t, `{"slots":16,"rules":[{"name":"r","strategy":"fixed","limit":1,"window":"1h","key_by":"header:X-User",
		"overrides":[{"key_prefix":"t-","strategy":"fixed","limit":2,"window":"1h"},
			{"key_prefix":"t-a:","limits":[{"name":"default","strategy":"fixed","limit":3,"window":"1h"},{"name":"burst","strategy":"token","limit":10,"window":"1s"}]},
			{"key":"t-a:vip","strategy":"fixed","limit":4,"window":"1h"}]}]}`)
	admits := func(user string) int {
		t.Helper()
		for n := range 10 {
			if _, local, _ := roundTrip(host, get("/", [2]string{"x-user", user})); local != nil {
				if local.StatusCode != 429 {
					t.Fatalf("%s: %d %s", user, local.StatusCode, local.Data)
				}
				return n
			}
		}
		t.Fatalf("%s: never denied", user)
		return 0
	}
	for _, c := range []struct {
		user string
		n    int
	}{{"t-a:vip", 4}, {"t-a:x", 3}, {"t-a:", 3}, {"t-a", 2}, {"t-", 2}, {"t", 1}, {"u", 1}} {
		if got := admits(c.user); got != c.n {
			t.Errorf("%s: %d admitted, want %d", c.user, got, c.n)
		}
	}
	_, _, resp := roundTrip(host, get("/", [2]string{"x-user", "t-a:y"}))
	if got := headerValue(resp, "ratelimit-policy"); got != `"default";q=3;w=3600, "burst";q=10;w=1` {
		t.Errorf("RateLimit-Policy %q", got)
	}
}

// TestFilterOverrideState: a key's usage carries across when an override
// of the rule's limit names starts or stops applying (a new configuration
// over the same shared data); an override of other names keeps its own
// record, and the rule's is found as it was.
func TestFilterOverrideState(t *testing.T) {
	sd := newMemData()
	rule := func(overrides string) string {
		return `{"slots":4,"rules":[{"name":"r","strategy":"fixed","limit":2,"window":"1h","key_by":"header:X-User"` + overrides + `}]}`
	}
	take := func(js, key string) core.Decision {
		t.Helper()
		cfg := mustConfig(t, js)
		st := newStore(cfg, sd)
		if err := st.createSlots(); err != nil {
			t.Fatal(err)
		}
		r, record := cfg.Rules[0].forKey(key)
		ds := make([]core.Decision, len(r.Limits))
		idx, err := st.take(r, record, t0, 1, ds)
		if err != nil {
			t.Fatal(err)
		}
		return ds[idx]
	}
	for range 2 {
		if d := take(rule(""), "k"); !d.Allowed {
			t.Fatal("denied under the rule")
		}
	}
	same := rule(`,"overrides":[{"key":"k","strategy":"fixed","limit":5,"window":"1h"}]`)
	if d := take(same, "k"); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("under an override of the same name: %+v, want admitted with 2 remaining (5 - 3)", d)
	}
	if d := take(rule(""), "k"); d.Allowed {
		t.Fatalf("back under the rule: %+v, want denied (3 taken of 2)", d)
	}
	other := rule(`,"overrides":[{"key":"k","limits":[{"name":"vip","strategy":"fixed","limit":1,"window":"1h"}]}]`)
	if d := take(other, "k"); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("under an override of another name: %+v, want a fresh state", d)
	}
	if d := take(other, "k"); d.Allowed {
		t.Fatalf("the override's own state: %+v, want denied", d)
	}
	if d := take(rule(""), "k"); d.Allowed {
		t.Fatalf("the rule's state: %+v, want denied as it was", d)
	}
}

// TestFilterOverrideGlobal: in global mode the override's limits are sent
// inline for its keys.
func TestFilterOverrideGlobal(t *testing.T) {
	host := emulate(t, `{"rules":[{"name":"g","strategy":"fixed","limit":1,"window":"1s","key_by":"header:x-user",
		"global":{"cluster":"rl_service"},"overrides":[{"key_prefix":"pro-","strategy":"gcra","limit":7,"window":"1m"}]}]}`)
	for user, want := range map[string]string{
		"plain": `[{"name":"g","strategy":"fixed_window","limit":1,"window":"1s"}]`,
		"pro-1": `[{"name":"g","strategy":"gcra","limit":7,"window":"1m"}]`,
	} {
		id := host.InitializeHttpContext()
		if act := host.CallOnRequestHeaders(id, get("/", [2]string{"x-user", user}), true); act != types.ActionPause {
			t.Fatalf("%s: %v", user, act)
		}
		cs := host.GetCalloutAttributesFromContext(id)
		var body struct {
			Limits json.RawMessage `json:"limits"`
		}
		if len(cs) != 1 || json.Unmarshal(cs[0].Body, &body) != nil {
			t.Fatalf("%s: callouts %+v", user, cs)
		}
		if string(body.Limits) != want {
			t.Errorf("%s: limits %s, want %s", user, body.Limits, want)
		}
	}
}

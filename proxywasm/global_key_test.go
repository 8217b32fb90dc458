package main

import (
	"strings"
	"testing"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/rlcore/rl/internal/request/pipeline"
	"github.com/rlcore/rl/internal/request/ruleconfig"
)

// TestGlobalRuleKey (review of issue 22): a rule naming rl-wasm-host's rule
// (global.rule) sends the key as key_by derived it, so that rule's own
// overrides match the same string as through rl-wasm-host's proxy and the
// decision API; before, it sent "<rule>:<key>" (and a digest past 256
// bytes), which no key_prefix of the service's rule matched. A key that
// rule would refuse (too long with its name, not printable ASCII) is
// answered 400 with no callout, as rl-wasm-host's proxy answers it; before,
// the filter sent a digest that rl-wasm-host decided under the rule's
// limits, no override applying.
func TestGlobalRuleKey(t *testing.T) {
	host := emulate(t, `{"rules":[
		{"name":"edge","endpoint":"/n","strategy":"fixed","limit":100,"window":"1s","key_by":"header:x-user","global":{"cluster":"rl","rule":"api"}},
		{"name":"r","endpoint":"/i","strategy":"fixed","limit":100,"window":"1s","key_by":"header:x-user","global":{"cluster":"rl"}}]}`)
	send := func(path, key string) (string, uint32) {
		t.Helper()
		id := host.InitializeHttpContext()
		act := host.CallOnRequestHeaders(id, get(path, [2]string{"x-user", key}), true)
		if local := host.GetSentLocalResponse(id); local != nil {
			if len(host.GetCalloutAttributesFromContext(id)) != 0 {
				t.Fatalf("%s %q: answered and called out", path, key)
			}
			return string(local.Data), local.StatusCode
		}
		cs := host.GetCalloutAttributesFromContext(id)
		if act != types.ActionPause || len(cs) != 1 {
			t.Fatalf("%s %q: %v, %d callouts", path, key, act, len(cs))
		}
		return string(cs[0].Body), 0
	}
	fits := strings.Repeat("k", pipeline.MaxStoredKey-len("api:")) // 252 bytes: "api:" and it make 256
	for _, c := range []struct {
		key, body string
		status    uint32
	}{
		{"bot-7", `{"rule":"api","key":"bot-7","cost":1}`, 0},
		{fits, `{"rule":"api","key":"` + fits + `","cost":1}`, 0},
		{fits + "k", "Bad request: invalid rate-limit key (header:x-user): 253 bytes (257 with the rule's name \"api\"), longer than 256\n", 400},
		{"bot-" + strings.Repeat("x", 296), "Bad request: invalid rate-limit key (header:x-user): 300 bytes (304 with the rule's name \"api\"), longer than 256\n", 400},
		{"a b", "Bad request: invalid rate-limit key (header:x-user): byte 0x20 at 1 is not printable ASCII (or is a space)\n", 400},
	} {
		body, status := send("/n", c.key)
		if body != c.body || status != c.status {
			t.Errorf("%.20q: %d %q, want %d %q", c.key, status, body, c.status, c.body)
		}
	}

	// Inline limits keep "<rule>:<key>" in rl-wasm-host's inline
	// namespace: as it is while "inline:" and it fit in 256 bytes, a
	// digest beyond (before, the digest began only past 256 bytes without
	// "inline:", and rl-wasm-host refused a "<rule>:<key>" of 250 to 256
	// bytes).
	atEdge := strings.Repeat("k", pipeline.MaxStoredKey-len("inline:r:"))
	for _, c := range []struct{ key, sent string }{
		{atEdge, "r:" + atEdge},
		{atEdge + "k", "r:" + pipeline.APIKeyDigest(atEdge+"k")},
		{"a b", "r:" + pipeline.APIKeyDigest("a b")},
	} {
		body, status := send("/i", c.key)
		if status != 0 || !strings.Contains(body, `"key":"`+c.sent+`"`) {
			t.Errorf("inline %.20q: %d %s, want key %.30q", c.key, status, body, c.sent)
		}
		if p := pipeline.StoredKeyProblem(ruleconfig.InlineNamespace, c.sent); p != "" {
			t.Errorf("inline %.20q: rl-wasm-host would refuse the key sent: %s", c.key, p)
		}
	}
}

// TestFilterIPOverrides (review of issue 22): the filter reads key_by:
// ip's overrides with the shared code, so a key_prefix is a network,
// matched by containment against the key as pipeline.IPKey writes it.
func TestFilterIPOverrides(t *testing.T) {
	cfg, err := parseConfig([]byte(`{"rules":[{"name":"i","strategy":"fixed","limit":1,"window":"1s","overrides":[
		{"key_prefix":"192.168.1.0/24","strategy":"fixed","limit":2,"window":"1s"},
		{"key_prefix":"2001:db8::/32","strategy":"fixed","limit":3,"window":"1s"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for peer, want := range map[string]int64{"192.168.1.9:1": 2, "192.168.100.7:1": 1, "[2001:db8:0:5::1]:1": 3, "[2001:db9::1]:1": 1} {
		key, ok := pipeline.IPKey{}.Key(peer, nil)
		if !ok {
			t.Fatal(peer)
		}
		if r, _ := cfg.Rules[0].forKey(key); r.Limits[0].Limit != want {
			t.Errorf("%s (key %s): limit %d, want %d", peer, key, r.Limits[0].Limit, want)
		}
	}
}

package service

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/request/pipeline"
)

// overrideRules: a rule of one per hour per X-User, raised for one key,
// for a tenant's prefix and for a longer prefix within it, listed least
// specific first: the order of the file does not matter.
const overrideRules = `
upstream: demo
rules:
  - name: r
    endpoint: /
    key_by: header:X-User
    strategy: fixed
    limit: 1
    window: 1h
    overrides:
      - {key_prefix: "t-", strategy: fixed, limit: 2, window: 1h}
      - {key_prefix: "t-a:", limits: [{name: default, strategy: fixed, limit: 3, window: 1h}, {name: burst, strategy: token, limit: 10, window: 1s}]}
      - {key: "t-a:vip", strategy: fixed, limit: 4, window: 1h}
`

// admits checks key against rule r through the decision API until it is
// denied and returns how many were admitted, and the override each answer
// named (the same in every answer).
func admits(t *testing.T, e *env, key string) (int, string) {
	t.Helper()
	return admitsRule(t, e, key, "r")
}

func admitsRule(t *testing.T, e *env, key, rule string) (int, string) {
	t.Helper()
	n, label := 0, "?"
	for range 1000 {
		r := e.post(t, "check", `{"rule":"`+rule+`","key":"`+key+`"}`)
		d := r.decision(t)
		if label != "?" {
			require.Equal(t, label, d.Override, key)
		}
		label = d.Override
		if r.code == 429 {
			return n, label
		}
		require.Equal(t, 200, r.code, string(r.body))
		n++
	}
	t.Fatalf("%s: never denied", key)
	return 0, ""
}

// TestOverrideExact: an override of one key replaces the rule's limits for
// that key alone, and the answer names it.
func TestOverrideExact(t *testing.T) {
	e := newEnv(t, overrideRules, nil)
	n, label := admits(t, e, "t-a:vip")
	require.Equal(t, 4, n)
	require.Equal(t, "key:t-a:vip", label)
	n, label = admits(t, e, "someone")
	require.Equal(t, 1, n)
	require.Empty(t, label)
	r := e.post(t, "check", `{"rule":"r","key":"someone"}`)
	require.NotContains(t, string(r.body), `"override"`, "no override: no field")
}

// TestOverridePrefix: an override of a prefix applies to every key starting
// with it (the prefix itself too), each key with its own state.
func TestOverridePrefix(t *testing.T) {
	e := newEnv(t, overrideRules, nil)
	for _, k := range []string{"t-b", "t-", "t-zzz"} {
		n, label := admits(t, e, k)
		require.Equal(t, 2, n, k)
		require.Equal(t, "key_prefix:t-", label, k)
	}
	// The override's limits are the RateLimit fields', and its own names.
	r := e.post(t, "check", `{"rule":"r","key":"t-a:1"}`)
	require.Equal(t, 200, r.code)
	require.Equal(t, `"default";q=3;w=3600, "burst";q=10;w=1`, r.h.Get("RateLimit-Policy"))
	d := r.decision(t)
	require.Equal(t, "key_prefix:t-a:", d.Override)
	require.Len(t, d.Limits, 2)
}

// TestOverrideMostSpecificFirst: an exact key before any prefix, a longer
// prefix before a shorter one, whatever the order in the file.
func TestOverrideMostSpecificFirst(t *testing.T) {
	e := newEnv(t, overrideRules, nil)
	for _, c := range []struct {
		key   string
		n     int
		label string
	}{
		{"t-a:vip", 4, "key:t-a:vip"},      // exact, though two prefixes match
		{"t-a:vip2", 3, "key_prefix:t-a:"}, // the longer prefix, listed after the shorter
		{"t-a:", 3, "key_prefix:t-a:"},     // a prefix matches itself
		{"t-a", 2, "key_prefix:t-"},        // not t-a:
		{"t", 1, ""},                       // no override
		{"T-a:vip", 1, ""},                 // keys are compared as they are
	} {
		n, label := admits(t, e, c.key)
		require.Equal(t, c.n, n, c.key)
		require.Equal(t, c.label, label, c.key)
	}
}

// TestOverrideProxy: the proxy decides a request by the override of the
// key as key_by derives it; an API key's override names its digest, and
// neither the answers nor the explanation show the key itself.
func TestOverrideProxy(t *testing.T) {
	vip := pipeline.APIKeyDigest("secret-vip-key")
	e := newEnv(t, `
upstream: demo
rules:
  - {name: u, endpoint: /u, key_by: "header:X-User", strategy: fixed, limit: 1, window: 1h,
     overrides: [{key_prefix: "t-", limits: [{name: a, strategy: fixed, limit: 2, window: 1h}, {name: b, strategy: fixed, limit: 5, window: 1h},
                                             {name: c, strategy: fixed, limit: 9, window: 1h}]}]}
  - {name: k, endpoint: /k, key_by: api_key, strategy: fixed, limit: 1, window: 1h,
     overrides: [{key: "`+strings.ToUpper(vip)+`", strategy: fixed, limit: 3, window: 1h}]}
`, nil)
	codes := func(path string, n int, hdr ...string) []int {
		var out []int
		for range n {
			out = append(out, e.do(t, "GET", path, "", hdr...).code)
		}
		return out
	}
	require.Equal(t, []int{200, 429}, codes("/u", 2, "X-User", "plain"))
	require.Equal(t, []int{200, 200, 429}, codes("/u", 3, "X-User", "t-1"))
	// The fields list the override's three limits, more than the rule's one.
	r := e.do(t, "GET", "/u", "", "X-User", "t-2")
	require.Equal(t, `"a";q=2;w=3600, "b";q=5;w=3600, "c";q=9;w=3600`, r.h.Get("RateLimit-Policy"))
	require.Equal(t, []int{200, 200, 200, 429}, codes("/k", 4, "Authorization", "Bearer secret-vip-key"))
	require.Equal(t, []int{200, 429}, codes("/k", 2, "Authorization", "Bearer other-key"))

	// The denial by an override's limit is counted under its name.
	m := e.do(t, "GET", "/metrics", "")
	require.Contains(t, string(m.body), `rl_limit_denials_total{limit="a",rule="u"} 1`)

	// The decision API reaches the same state by the digest, and names the
	// override by it.
	r = e.post(t, "peek", `{"rule":"k","key":"`+vip+`","explain":true}`)
	require.Equal(t, 429, r.code)
	d := r.decision(t)
	require.Equal(t, "key:"+vip, d.Override)
	require.Equal(t, &ExplainOverrideJSON{Override: "key:" + vip, Why: []string{"the key is the override's key (an exact key comes before every prefix)"}}, d.Explain.Override)
	require.NotContains(t, string(r.body), "secret-vip-key")

	ex := e.svc.ExplainRequest(&pipeline.Request{Method: "GET", Host: "h", Path: "/k", Peer: "192.0.2.1:1",
		Header: pipeline.HeaderFunc(func(n string) []string {
			if strings.EqualFold(n, "authorization") {
				return []string{"Bearer secret-vip-key"}
			}
			return nil
		})})
	b, err := json.Marshal(ex)
	require.NoError(t, err)
	require.NotContains(t, string(b), "secret-vip-key")
	require.Equal(t, "key:"+vip, ex.Override.Override)
	require.Equal(t, int64(3), ex.Limits[0].Limit, "the override's limits")
}

// TestOverrideReload: a reload that adds or removes an override takes
// effect at the next request. Usage carries across under a limit of the
// same name: the rule's and the override's shorthand are both "default".
func TestOverrideReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	write := func(overrides string) {
		require.NoError(t, os.WriteFile(path, []byte(`
rules:
  - {name: r, key_by: "header:X-User", strategy: fixed, limit: 2, window: 1h`+overrides+`}
`), 0o600))
	}
	write("")
	e := newEnv(t, `rules: [{name: r, strategy: fixed, limit: 2, window: 1h}]`, nil)
	require.NoError(t, e.svc.Reload(path))
	check := func(key string) (int, DecisionJSON) {
		r := e.post(t, "check", `{"rule":"r","key":"`+key+`"}`)
		return r.code, r.decision(t)
	}
	for range 2 {
		code, _ := check("k")
		require.Equal(t, 200, code)
	}
	code, _ := check("k")
	require.Equal(t, 429, code)

	// Added: the next request is decided by it, on the usage so far.
	write(`, overrides: [{key: k, strategy: fixed, limit: 5, window: 1h}]`)
	require.NoError(t, e.svc.Reload(path))
	code, d := check("k")
	require.Equal(t, 200, code)
	require.Equal(t, "key:k", d.Override)
	require.Equal(t, int64(2), d.Remaining, "5, less the 2 taken under the rule and this one")

	// Moved to a prefix: the same.
	write(`, overrides: [{key_prefix: "k", strategy: fixed, limit: 5, window: 1h}]`)
	require.NoError(t, e.svc.Reload(path))
	code, d = check("k")
	require.Equal(t, 200, code)
	require.Equal(t, "key_prefix:k", d.Override)
	require.Equal(t, int64(1), d.Remaining)

	// Removed: the rule decides again, on the same usage (4 > 2).
	write("")
	require.NoError(t, e.svc.Reload(path))
	code, d = check("k")
	require.Equal(t, 429, code)
	require.Empty(t, d.Override)

	// An override of other limit names starts fresh, and leaves the rule's
	// state as it was.
	write(`, overrides: [{key: k, limits: [{name: vip, strategy: fixed, limit: 1, window: 1h}]}]`)
	require.NoError(t, e.svc.Reload(path))
	code, d = check("k")
	require.Equal(t, 200, code)
	require.Equal(t, int64(0), d.Remaining)
	code, _ = check("k")
	require.Equal(t, 429, code)
	write("")
	require.NoError(t, e.svc.Reload(path))
	code, _ = check("k")
	require.Equal(t, 429, code, "the rule's usage is still 4")

	// An invalid override is refused with the rest of the file, the rules
	// in force kept.
	write(`, overrides: [{key: k}]`)
	err := e.svc.Reload(path)
	require.ErrorContains(t, err, `rules[0] "r": overrides[0].limits: missing`)
}

// TestOverrideResetAndBatch: a reset forgets the key under the rule's
// limits and its override's; a batch item names its override.
func TestOverrideResetAndBatch(t *testing.T) {
	e := newEnv(t, `rules: [{name: r, strategy: fixed, limit: 1, window: 1h,
  overrides: [{key: vip, limits: [{name: default, strategy: fixed, limit: 2, window: 1h}, {name: extra, strategy: fixed, limit: 2, window: 1h}]}]}]`, nil)
	for range 2 {
		require.Equal(t, 200, e.post(t, "check", `{"rule":"r","key":"vip"}`).code)
	}
	require.Equal(t, 429, e.post(t, "check", `{"rule":"r","key":"vip"}`).code)
	r := e.post(t, "reset", `{"rule":"r","key":"vip"}`)
	require.JSONEq(t, `{"reset":true,"rule":"r","key":"vip","override":"key:vip"}`, string(r.body))
	r = e.post(t, "batch", `{"items":[{"rule":"r","key":"vip","cost":2},{"rule":"r","key":"other"}]}`)
	require.Equal(t, 200, r.code, string(r.body))
	var b BatchJSON
	require.NoError(t, json.Unmarshal(r.body, &b))
	require.Equal(t, "key:vip", b.Results[0].Override)
	require.Empty(t, b.Results[1].Override)
}

// TestOverrideExplain: explain says which override decides and why, and
// lists its limits; the rules endpoint and the canonical form list the
// overrides, and the canonical form loads to itself.
func TestOverrideExplain(t *testing.T) {
	e := newEnv(t, overrideRules, nil)
	r := e.post(t, "check", `{"rule":"r","key":"t-a:x","explain":true}`)
	d := r.decision(t)
	require.Equal(t, &ExplainOverrideJSON{Override: "key_prefix:t-a:", Why: []string{
		`the key starts with the override's key_prefix "t-a:", and no override names the key itself`,
		`not chosen: key_prefix "t-" matches too, but is shorter (a longer prefix comes first)`}}, d.Explain.Override)
	require.Len(t, d.Explain.Limits, 2)
	require.Equal(t, "burst", d.Explain.Limits[1].Name)
	require.NotNil(t, d.Explain.Limits[1].Result)
	require.Len(t, d.Explain.Rule.Config.Overrides, 3)

	r = e.post(t, "check", `{"rule":"r","key":"z","explain":true}`)
	require.Equal(t, &ExplainOverrideJSON{Why: []string{"no override of the rule applies to the key: the rule's limits decide"}},
		r.decision(t).Explain.Override)

	b, err := e.svc.Config().MarshalNormalized()
	require.NoError(t, err)
	require.Contains(t, string(b), `"key_prefix": "t-a:"`)
	again, err := ParseConfig("n.json", "json", b)
	require.NoError(t, err, string(b))
	b2, err := again.MarshalNormalized()
	require.NoError(t, err)
	require.Equal(t, string(b), string(b2))
	require.Equal(t, e.svc.Config().Rules[0].Overrides, again.Rules[0].Overrides)
}

// readmeYAML returns the i-th YAML block after heading in the file at path.
func readmeYAML(t *testing.T, path, heading string, i int) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(b), heading)
	require.True(t, ok, heading)
	var yaml string
	for range i + 1 {
		_, after, ok = strings.Cut(after, "```yaml\n")
		require.True(t, ok)
		yaml, after, ok = strings.Cut(after, "```")
		require.True(t, ok)
	}
	return yaml
}

// TestOverrideReadmeExample: the example of docs/service.md's "Per-key
// overrides" loads and decides as the text says.
func TestOverrideReadmeExample(t *testing.T) {
	// The example loads, and decides by its overrides.
	e := newEnv(t, readmeYAML(t, "../../../docs/service.md", "### Per-key overrides\n", 0), nil)
	// A client that sets X-Tenant-User itself gets tenant A's tier, afresh
	// for each new key: what the docs warn of (docs/security.md, known
	// limits), so its example's header must come from a trusted layer.
	for key, want := range map[string]int{"tenant-a:u1": 50, "tenant-b:ops": 200, "tenant-b:u1": 10, "tenant-a:random-1": 50, "tenant-a:random-2": 50} {
		n, _ := admitsRule(t, e, key, "api")
		require.Equal(t, want, n, key)
	}
	require.Contains(t, readmeYAML(t, "../../../docs/service.md", "### Per-key overrides\n", 0), "never by the client")
	for key, want := range map[string]string{"198.51.100.7": "key_prefix:198.51.100.0/24", "198.51.10.7": "",
		"2001:db8:42:1::/64": "key_prefix:2001:db8:42::/48", "2001:db8:4:2::/64": ""} {
		r := e.post(t, "peek", `{"rule":"partners","key":"`+key+`"}`)
		require.Equal(t, want, r.decision(t).Override, key)
	}

	e = newEnv(t, readmeYAML(t, "../../../docs/service.md", "### Per-key overrides\n", 0), nil)
	full := e.svc.Config()
	for key, want := range map[string]string{
		"tenant-a:u42": "key_prefix:tenant-a:", "tenant-a:": "key_prefix:tenant-a:", "tenant-a:batch-7": "key_prefix:tenant-a:batch-",
		"tenant-b:ops": "key:tenant-b:ops", "tenant-b:u1": "", "tenant-ab": "",
	} {
		r := e.post(t, "peek", `{"rule":"api","key":"`+key+`"}`)
		require.Equal(t, want, r.decision(t).Override, key)
	}
	r := e.post(t, "peek", `{"rule":"pay","key":"`+pipeline.APIKeyDigest("123456")+`"}`)
	require.Equal(t, "key:"+pipeline.APIKeyDigest("123456"), r.decision(t).Override)

	// A key of tenant A that spent 900 of daily under the rule has 19,100
	// left once the override is added.
	plain := *full
	plain.Rules = append([]RuleSpec(nil), full.Rules...)
	plain.Rules[0].Overrides = nil
	require.NoError(t, e.svc.SetConfig(&plain))
	for range 90 {
		require.Equal(t, 200, e.post(t, "check", `{"rule":"api","key":"tenant-a:u42","cost":10}`).code)
		e.now.Add(1_000_000)
	}
	require.NoError(t, e.svc.SetConfig(full))
	d := e.post(t, "peek", `{"rule":"api","key":"tenant-a:u42","cost":0}`).decision(t)
	require.Equal(t, "daily", d.Limits[1].Name)
	require.Equal(t, int64(19_100), d.Limits[1].Remaining)
}

// TestOverrideNetworks (review of issue 22): under key_by: ip an override's
// key_prefix is a CIDR network matched by containment, through the proxy
// (the client's key as key_by derives it: IPv4 by address, IPv6 by /64, or
// the configured prefix lengths) and the decision API alike; a text prefix,
// which matched 192.168.100.7 for "192.168.1", is refused at load.
func TestOverrideNetworks(t *testing.T) {
	e := newEnv(t, `
upstream: demo
trusted_proxies: ["127.0.0.1", "::1"]
rules:
  - name: r
    endpoint: /
    key_by: ip
    strategy: fixed
    limit: 1
    window: 1h
    overrides:
      - {key_prefix: "192.168.1.0/24", strategy: fixed, limit: 2, window: 1h}
      - {key_prefix: "2001:db8::/32", strategy: fixed, limit: 3, window: 1h}
      - {key: "2001:db8:0:7::/64", strategy: fixed, limit: 4, window: 1h}
`, nil)
	proxied := func(client string) (int, string) {
		n := 0
		for range 10 {
			r := e.do(t, "GET", "/x", "", "X-Forwarded-For", client)
			if r.code == 429 {
				return n, r.h.Get("RateLimit-Policy")
			}
			require.Equal(t, 200, r.code, string(r.body))
			n++
		}
		return n, ""
	}
	for _, c := range []struct {
		client string
		n      int
	}{
		{"192.168.1.7", 2},
		{"192.168.100.7", 1}, // "192.168.1" as text selected it
		{"2001:db8:0:1::1", 3},
		{"2001:db8:0:1::2", 0}, // the same /64: its quota is spent
		{"2001:db8:0:7:ffff::1", 4},
		{"2001:db9::1", 1},
	} {
		n, _ := proxied(c.client)
		require.Equal(t, c.n, n, c.client)
	}
	// The decision API matches the same keys the same way.
	for key, want := range map[string]string{"192.168.1.9": "key_prefix:192.168.1.0/24", "192.168.100.9": "",
		"2001:db8:5:5::/64": "key_prefix:2001:db8::/32", "2001:db8:0:7::/64": "key:2001:db8:0:7::/64"} {
		r := e.post(t, "peek", `{"rule":"r","key":"`+key+`","explain":true}`)
		d := r.decision(t)
		require.Equal(t, want, d.Override, key)
		if want != "" && strings.HasPrefix(want, "key_prefix:") {
			require.Contains(t, d.Explain.Override.Why[0], "the key's network is within", key)
		}
	}

	// A text prefix, an address as a prefix, and a prefix longer than the
	// keys are refused, naming the field; ipv6_prefix sets what is longer.
	_, err := ParseConfig("t.yaml", "yaml", []byte(`{rules: [{name: r, key_by: ip, strategy: fixed, limit: 1, window: 1h, overrides: [
	  {key_prefix: "192.168.1", strategy: fixed, limit: 2, window: 1h}, {key_prefix: "2001:db8::/96", strategy: fixed, limit: 2, window: 1h}]}]}`))
	require.ErrorContains(t, err, `overrides[0].key_prefix: "192.168.1" is not a CIDR prefix`)
	require.ErrorContains(t, err, `write a CIDR prefix such as "192.168.1.0/24"`)
	require.ErrorContains(t, err, `overrides[1].key_prefix: IPv6 clients are keyed by their /64 (ipv6_prefix)`)
	_, err = ParseConfig("t.yaml", "yaml", []byte(`{ipv6_prefix: 48, rules: [{name: r, key_by: ip, strategy: fixed, limit: 1, window: 1h, overrides: [
	  {key_prefix: "2001:db8:1::/56", strategy: fixed, limit: 2, window: 1h}]}]}`))
	require.ErrorContains(t, err, `IPv6 clients are keyed by their /48 (ipv6_prefix), so each key is a whole /48 and a /56 contains none`)
	cfg, err := ParseConfig("t.yaml", "yaml", []byte(`{ipv6_prefix: 48, rules: [{name: r, key_by: ip, strategy: fixed, limit: 1, window: 1h, overrides: [
	  {key: "2001:db8:1::/48", strategy: fixed, limit: 2, window: 1h}]}]}`))
	require.NoError(t, err)
	require.Equal(t, "2001:db8:1::/48", cfg.Rules[0].Overrides[0].Value)
}

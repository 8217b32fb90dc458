package service

import (
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

const tokSettleRole = "settle-token-0123456789abcdef"

// roleEnv serves rules with an admin, a check and a settle token on the
// one-listener handler; as(role) gives a role's Authorization header.
func roleEnv(t *testing.T, rules string) (api string, as func(role string) []string, e *env) {
	t.Helper()
	up := newUpstream(t)
	e = newEnv(t, `
upstream: `+up.srv.URL+`
api_tokens:
  - {name: ops, role: admin, sha256: `+tokenHash(tokAdmin)+`}
  - {name: edge, role: check, sha256: `+tokenHash(tokCheck)+`}
  - {name: gateway, role: settle, sha256: `+tokenHash(tokSettleRole)+`}
rules:
`+rules, nil)
	srv := httptest.NewServer(e.svc.Handler())
	t.Cleanup(srv.Close)
	toks := map[string]string{"admin": tokAdmin, "check": tokCheck, "settle": tokSettleRole}
	return srv.URL + APIPrefix, func(role string) []string {
		tok, ok := toks[role]
		require.True(t, ok, role)
		return []string{"Authorization", "Bearer " + tok}
	}, e
}

// TestSettleBoundedByRole: a settle with a check or settle token charges
// at most the key's smallest enforced limit (settleBound), the most one
// check can take. Before, such a settle needed no check and its actual was
// capped at 2^40 only: {"estimate":1,"actual":99999999999999999999} on a
// 10/s bucket denied the key for 292 years, and only an admin reset
// cleared it. The legitimate case, an actual above the estimate up to the
// bound, is charged exactly; an admin keeps the 2^40 cap.
func TestSettleBoundedByRole(t *testing.T) {
	api, as, _ := roleEnv(t, `
  - {name: tb, endpoint: /tb, strategy: token_bucket, limit: 10, rate: 10, window: 1s}
  - name: two
    endpoint: /two
    key_by: "header:X-User"
    limits:
      - {name: s, strategy: fixed, limit: 10, window: 1s}
      - {name: d, strategy: fixed, limit: 1000, window: 1d}
      - {name: c, strategy: fixed, limit: 3, window: 1s, shadow: true}
    overrides: [{key: big, strategy: fixed, limit: 100, window: 1s}]
  - {name: sh, endpoint: /sh, strategy: fixed, limit: 50, window: 1m, shadow: true}
`)
	post := func(role, op, body string) reply {
		t.Helper()
		return doURL(t, "POST", api+op, body, as(role)...)
	}
	remaining := func(rule, key string) int64 {
		t.Helper()
		r := post("admin", "peek", `{"rule":"`+rule+`","key":"`+key+`","cost":0}`)
		require.Equal(t, 200, r.code, "%s", r.body)
		return r.decision(t).Remaining
	}

	// The reviewer's attack, with a check and with a settle token.
	for _, role := range []string{"check", "settle"} {
		r := post(role, "settle", `{"rule":"tb","key":"victim","estimate":1,"actual":99999999999999999999}`)
		require.Equal(t, 400, r.code, "%s: %s", role, r.body)
		ej := r.errorJSON(t)
		require.Equal(t, "invalid_cost", ej.Code)
		require.Equal(t, "actual: 9223372036854775807 or more is above 10, the most a settle with a "+role+
			" token may charge for one call on this key (its smallest enforced limit, the most one check can take); "+
			"settle an actual of at most 10, or a larger cost with an admin token", ej.Error)
		r = post(role, "check", `{"rule":"tb","key":"victim"}`)
		require.Equal(t, 200, r.code, "%s: the victim is locked out: %s", role, r.body)
	}
	// Just above the bound, the same.
	require.Equal(t, 400, post("check", "settle", `{"rule":"tb","key":"victim","estimate":1,"actual":11}`).code)
	// A refund of more than a check could take is no settle token's either.
	r := post("settle", "settle", `{"rule":"tb","key":"victim","estimate":1099511627776,"actual":0}`)
	require.Equal(t, 400, r.code, "%s", r.body)
	require.Equal(t, "estimate: 1099511627776 is above 10, the most one check of this key can take (its smallest enforced limit), "+
		"so no check took it; settle the estimate the check took, at most 10", r.errorJSON(t).Error)
	require.Equal(t, int64(8), remaining("tb", "victim"), "the two checks stand")

	// The legitimate case: more than the estimate, up to the bound, is
	// charged exactly.
	for i, role := range []string{"check", "settle"} {
		key := "user" + strconv.Itoa(i)
		require.Equal(t, 200, post(role, "check", `{"rule":"tb","key":"`+key+`","cost":2}`).code)
		r := post(role, "settle", `{"rule":"tb","key":"`+key+`","estimate":2,"actual":10}`)
		require.Equal(t, 200, r.code, "%s: %s", role, r.body)
		require.Equal(t, int64(8), *r.decision(t).Delta)
		require.Equal(t, int64(0), remaining("tb", key))
	}

	// Several limits: the smallest enforced one (10, not 1000, and not
	// the shadow limit's 3); a key's override is its own bound.
	require.Equal(t, 400, post("check", "settle", `{"rule":"two","key":"k","estimate":1,"actual":11}`).code)
	r = post("check", "settle", `{"rule":"two","key":"k","estimate":1,"actual":10}`)
	require.Equal(t, 200, r.code, "%s", r.body)
	r = post("check", "settle", `{"rule":"two","key":"big","estimate":1,"actual":100}`)
	require.Equal(t, 200, r.code, "%s", r.body)
	require.Equal(t, 400, post("check", "settle", `{"rule":"two","key":"big","estimate":1,"actual":101}`).code)
	// Shadow limits only: the largest.
	require.Equal(t, 200, post("check", "settle", `{"rule":"sh","key":"k","estimate":1,"actual":50}`).code)
	require.Equal(t, 400, post("check", "settle", `{"rule":"sh","key":"k","estimate":1,"actual":51}`).code)

	// An admin keeps the 2^40 cap (and may reset the key).
	r = post("admin", "settle", `{"rule":"tb","key":"admins","estimate":1,"actual":99999999999999999999}`)
	require.Equal(t, 200, r.code, "%s", r.body)
	require.Equal(t, int64(1<<40-1), *r.decision(t).Delta)
}

// TestExplainByRole: explain shows a check or settle token only what its
// role may read elsewhere: the rule without its overrides, the limits that
// decided the key and the label of the override that did. Before,
// {"rule":"tier","key":"x","cost":0,"explain":true} answered a check token
// the whole rule, every override's exact key, prefix and API-key digest,
// which GET /v1/ratelimit/rules refuses it.
func TestExplainByRole(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef"
	api, as, _ := roleEnv(t, `
  - name: tier
    endpoint: /tier
    key_by: "header:X-User"
    strategy: fixed
    limit: 5
    window: 1m
    overrides:
      - {key: "vip-customer-secret", strategy: fixed, limit: 100, window: 1m}
      - {key: "`+digest+`", strategy: fixed, limit: 50, window: 1m}
      - {key_prefix: "ten", strategy: fixed, limit: 7, window: 1m}
      - {key_prefix: "tenant-b", strategy: fixed, limit: 9, window: 1m}
`)
	for _, c := range []struct{ op, body string }{
		{"peek", `{"rule":"tier","key":"x","cost":0,"explain":true}`},
		{"check", `{"rule":"tier","key":"x","explain":true}`},
		{"peek", `{"rule":"tier","key":"tenant-b7","cost":0,"explain":true}`},
		{"check", `{"rule":"tier","key":"tenant-b7","explain":true}`},
	} {
		for _, role := range []string{"check", "settle", "admin"} {
			r := doURL(t, "POST", api+c.op, c.body, as(role)...)
			require.Equal(t, 200, r.code, "%s %s: %s", role, c.body, r.body)
			ex := r.decision(t).Explain
			require.NotNil(t, ex)
			require.Equal(t, "tier", ex.Rule.Config.Name)
			require.Len(t, ex.Rule.Config.Limits, 1)
			if role == "admin" {
				require.Len(t, ex.Rule.Config.Overrides, 4, "an admin sees the whole rule")
				require.Contains(t, string(r.body), digest)
				continue
			}
			for _, secret := range []string{"vip-customer-secret", digest, `\"ten\"`, `"ten"`} {
				require.NotContains(t, string(r.body), secret, "%s %s", role, c.body)
			}
			require.Nil(t, ex.Rule.Config.Overrides, role)
			require.NotNil(t, ex.Override)
			if r.decision(t).Override == "" {
				require.Equal(t, "", ex.Override.Override)
				require.Equal(t, int64(5), ex.Limits[0].Limit)
			} else {
				require.Equal(t, "key_prefix:tenant-b", ex.Override.Override, "the override that matched is named")
				require.Equal(t, []string{`the key starts with the override's key_prefix "tenant-b", and no override names the key itself`}, ex.Override.Why)
				require.Equal(t, int64(9), ex.Limits[0].Limit, "the limits that decided the key")
			}
		}
	}
	// An admin sees the other override that matched, too.
	r := doURL(t, "POST", api+"peek", `{"rule":"tier","key":"tenant-b7","cost":0,"explain":true}`, as("admin")...)
	require.Contains(t, r.decision(t).Explain.Override.Why, `not chosen: key_prefix "ten" matches too, but is shorter (a longer prefix comes first)`)
}

// TestAPIFieldsOneSpelling: every field of a decision-API body is read in
// its one documented spelling. Before, encoding/json matched names
// case-insensitively with Unicode folding, the last one winning:
// {"key":"other","Key":"victim"} decided "victim", as did "RULE",
// "ITEMS", "Estimate", "ACTUAL" and "\u212aey" (a Kelvin sign), so a proxy
// in front checking the first spelling saw another request than the one
// decided. Now another spelling is 400 unknown_field naming the spelling
// wanted, and a field given twice (however escaped) is 400.
func TestAPIFieldsOneSpelling(t *testing.T) {
	e := newEnv(t, `rules: [{name: r, strategy: fixed, limit: 5, window: 1m}, {name: other, strategy: fixed, limit: 5, window: 1m}]`, nil)
	for _, c := range []struct{ op, body, code, msg string }{
		{"check", `{"rule":"r","key":"other","Key":"victim"}`, "unknown_field", `unknown field "Key": names are case-sensitive; want "key"`},
		{"check", `{"rule":"r","key":"other","KEY":"victim"}`, "unknown_field", `unknown field "KEY": names are case-sensitive; want "key"`},
		{"check", `{"rule":"r","key":"other","\u212aey":"victim"}`, "unknown_field", `unknown field "\u212aey": names are case-sensitive; want "key"`},
		{"check", `{"rule":"other","RULE":"r","key":"victim"}`, "unknown_field", `unknown field "RULE": names are case-sensitive; want "rule"`},
		{"check", `{"rule":"r","key":"victim","Cost":0}`, "unknown_field", `want "cost"`},
		{"check", `{"LIMITS":[{"strategy":"fixed","limit":1000,"window":"1m"}],"key":"victim"}`, "unknown_field", `want "limits"`},
		{"peek", `{"rule":"r","key":"x","Explain":true}`, "unknown_field", `want "explain"`},
		{"check", `{"rule":"r","key":"other","k\u0065y":"victim"}`, "invalid_json", `key: given twice in one object`},
		{"settle", `{"rule":"r","key":"victim","Estimate":1,"estimate":1,"actual":3}`, "unknown_field", `unknown field "Estimate": names are case-sensitive; want "estimate"`},
		{"settle", `{"rule":"r","key":"victim","estimate":1,"ACTUAL":3}`, "unknown_field", `unknown field "ACTUAL": names are case-sensitive; want "actual"`},
		{"settle", `{"rule":"r","key":"victim","estimate":1,"actual":1,"actual":3}`, "invalid_json", `actual: given twice in one object`},
		{"batch", `{"ITEMS":[{"rule":"r","key":"victim"}]}`, "unknown_field", `unknown field "ITEMS": names are case-sensitive; want "items"`},
		{"batch", `{"items":[{"rule":"r","key":"other","Key":"victim"}]}`, "unknown_field", `unknown field "Key" in items[0]: names are case-sensitive; want "key"`},
		{"batch", `{"items":[{"rule":"r","key":"a"},{"rule":"r","key":"other","\u212aey":"victim"}]}`, "unknown_field", `in items[1]: names are case-sensitive; want "key"`},
		{"batch", `{"items":[{"rule":"r","key":"other","key":"victim"}]}`, "invalid_json", `items[0].key: given twice in one object`},
		{"batch", `{"items":[{"rule":"r","key":"victim"}],"Atomic":false}`, "unknown_field", `want "atomic"`},
		{"batch", `{"items":[{"rule":"r","key":"victim"}],"peek":true,"PEEK":false}`, "unknown_field", `want "peek"`},
		// Inline limits, an admin's, are ruleconfig.Limits: the same.
		{"check", `{"limits":[{"strategy":"fixed","limit":1000,"Limit":1,"window":"1m"}],"key":"victim"}`, "invalid_limits", `limits[0].Limit: unknown field: names are case-sensitive; want "limit"`},
		{"check", `{"limits":[{"strategy":"fixed","limit":1000,"limit":1,"window":"1m"}],"key":"victim"}`, "invalid_limits", `limits[0].limit: given twice in one object`},
		{"batch", `{"items":[{"limits":[{"strategy":"fixed","limit":1000,"\u212aind":1,"window":"1m"}],"key":"victim"}]}`, "invalid_limits", `unknown field (want one of name`},
		{"reset", `{"rule":"r","Key":"victim","key":"other"}`, "unknown_field", `want "key"`},
	} {
		r := e.post(t, c.op, c.body)
		require.Equal(t, 400, r.code, "%s %s: %s", c.op, c.body, r.body)
		ej := r.errorJSON(t)
		require.Equal(t, c.code, ej.Code, "%s %s: %s", c.op, c.body, r.body)
		require.Contains(t, ej.Error, c.msg, "%s %s", c.op, c.body)
	}
	// Nothing reached the victim.
	r := e.post(t, "peek", `{"rule":"r","key":"victim","cost":0}`)
	require.Equal(t, int64(5), r.decision(t).Remaining)
	// Invalid UTF-8 in a string is refused, not replaced.
	r = e.post(t, "check", "{\"rule\":\"r\xff\",\"key\":\"k\"}")
	require.Equal(t, 400, r.code, "%s", r.body)
	require.Equal(t, "invalid_json", r.errorJSON(t).Code)
}

// TestSettleExplainBatchAttacks: the settle, explain and batch surfaces
// tried once more as an attacker with a check token: a settle hidden in a
// batch, negative and oversized values, inline limits, explain in a batch,
// null fields and names of the wrong kind. Each is refused, and the victim
// is untouched.
func TestSettleExplainBatchAttacks(t *testing.T) {
	api, as, _ := roleEnv(t, `
  - name: tb
    endpoint: /tb
    key_by: "header:X-User"
    limits:
      - {name: b, strategy: token_bucket, limit: 10, rate: 10, window: 1s}
      - {name: cand, strategy: fixed, limit: 1, window: 1s, shadow: true}
    overrides: [{key: vip, strategy: fixed, limit: 1000, window: 1s}]
`)
	for _, c := range []struct {
		op, body string
		status   int
		code     string
	}{
		{"batch", `{"items":[{"rule":"tb","key":"victim","estimate":1,"actual":10}]}`, 400, "invalid_cost"},
		{"batch", `{"items":[{"rule":"tb","key":"victim","delta":1000000}]}`, 400, "invalid_cost"},
		{"batch", `{"items":[{"rule":"tb","key":"victim","explain":true}]}`, 400, "invalid_batch"},
		{"batch", `{"items":[{"rule":"tb","key":"victim","cost":1099511627777}]}`, 400, "invalid_cost"},
		{"batch", `{"items":[{"limits":[{"strategy":"fixed","limit":1,"window":"1h"}],"key":"tb:victim"}]}`, 403, "forbidden"},
		{"batch", `{"items":null}`, 400, "invalid_batch"},
		{"settle", `{"rule":"tb","key":"victim","estimate":-1,"actual":10}`, 400, "invalid_cost"},
		{"settle", `{"rule":"tb","key":"victim","estimate":1,"actual":-10}`, 400, "invalid_cost"},
		{"settle", `{"rule":"tb","key":"victim","estimate":1,"actual":1e9}`, 400, "invalid_cost"},
		{"settle", `{"rule":"tb","key":"victim","estimate":1,"actual":"1000"}`, 400, "invalid_cost"},
		{"settle", `{"rule":"tb","key":"victim","estimate":1,"actual":1000}`, 400, "invalid_cost"},
		{"settle", `{"rule":"tb","key":"victim","estimate":1,"actual":11,"uncharged":["cand"]}`, 400, "invalid_cost"},
		{"settle", `{"rule":"tb","key":"victim","estimate":1,"actual":5,"uncharged":["b"]}`, 400, "invalid_limits"},
		{"settle", `{"rule":"tb","key":"victim","estimate":1,"actual":5,"uncharged":["CAND"]}`, 400, "invalid_limits"},
		{"settle", `{"limits":[{"strategy":"fixed","limit":1,"window":"1h"}],"key":"tb:victim","estimate":1,"actual":1000000}`, 403, "forbidden"},
		{"settle", `{"rule":"tb","key":null,"estimate":1,"actual":5}`, 400, "invalid_key"},
		{"settle", `{"rule":"tb","key":"victim","estimate":1,"actual":5,"explain":true}`, 400, "invalid_json"},
		{"peek", `{"rule":"tb","key":"victim","cost":0,"explain":"yes"}`, 400, "invalid_json"},
		{"reset", `{"rule":"tb","key":"victim"}`, 403, "forbidden"},
	} {
		r := doURL(t, "POST", api+c.op, c.body, as("check")...)
		require.Equal(t, c.status, r.code, "%s %s: %s", c.op, c.body, r.body)
		require.Equal(t, c.code, r.errorJSON(t).Code, "%s %s: %s", c.op, c.body, r.body)
	}
	r := doURL(t, "POST", api+"peek", `{"rule":"tb","key":"victim","cost":0}`, as("admin")...)
	require.Equal(t, int64(10), r.decision(t).Remaining, "the victim was charged")
	// The override's bound is the override's limit: 1000 for vip, and the
	// explain of a check token names only that override.
	r = doURL(t, "POST", api+"settle", `{"rule":"tb","key":"vip","estimate":1,"actual":1000}`, as("check")...)
	require.Equal(t, 200, r.code, "%s", r.body)
}

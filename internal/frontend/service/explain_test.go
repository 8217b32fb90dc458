package service

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/request/pipeline"
)

func sampleEnv(t *testing.T) *env {
	t.Helper()
	data, err := os.ReadFile("../../../cmd/rl-wasm-host/sample.yaml")
	require.NoError(t, err)
	return newEnv(t, string(data), nil)
}

// TestExplainDecision: "explain": true on check and peek adds the rule
// and why, the key as stored, the cost and where it came from, every
// limit's evaluation (the deciding one marked) and the fields sent.
func TestExplainDecision(t *testing.T) {
	e := sampleEnv(t)
	r := e.post(t, "check", `{"rule":"search","key":"192.0.2.1","explain":true}`)
	require.Equal(t, 200, r.code, string(r.body))
	ex := r.decision(t).Explain
	require.NotNil(t, ex)
	require.Equal(t, "search", ex.Rule.Name)
	require.Equal(t, []string{`named by the request's "rule"`}, ex.Rule.Why)
	require.Equal(t, &RuleJSON{Name: "search", Endpoint: "/v1/search", Methods: []string{"GET"}, KeyBy: "ip", Cost: 1, MinCost: 1,
		FailOpen: true, RateLimitFields: "all", QuotaUnit: "requests", Limits: []LimitSpecJSON{
			{Name: "burst", Strategy: "token_bucket", Limit: 10, Window: "1s"},
			{Name: "daily", Strategy: "fixed_window", Limit: 1000, Window: "1d"}}}, ex.Rule.Config)
	require.Equal(t, &ExplainKeyJSON{Source: "request", Key: "192.0.2.1", Stored: "search:192.0.2.1"}, ex.Key)
	require.Equal(t, &ExplainCostJSON{Cost: 1, Source: "the rule's cost (the request gave none)"}, ex.Cost)
	require.Len(t, ex.Limits, 2)
	require.Equal(t, "enforced", ex.Limits[0].Mode)
	require.True(t, ex.Limits[0].Deciding, "the fewest remaining")
	require.Equal(t, int64(9), ex.Limits[0].Result.Remaining)
	require.Equal(t, int64(100), ex.Limits[0].Result.NextAfterMS)
	require.False(t, ex.Limits[1].Deciding)
	require.Equal(t, int64(999), ex.Limits[1].Result.Remaining)
	require.Equal(t, [][2]string{
		{"RateLimit-Policy", r.h.Get("RateLimit-Policy")}, {"RateLimit", r.h.Get("RateLimit")},
		{"X-RateLimit-Limit", "10"}, {"X-RateLimit-Remaining", "9"}, {"X-RateLimit-Reset", "1"},
	}, ex.Fields)
	require.Equal(t, "admitted, cost taken from every limit", ex.Decision)

	r = e.post(t, "peek", `{"rule":"search","key":"192.0.2.1","cost":20,"explain":true}`)
	require.Equal(t, 429, r.code)
	ex = r.decision(t).Explain
	require.Equal(t, "peeked, nothing taken: a check would be denied", ex.Decision)
	require.Equal(t, &ExplainCostJSON{Cost: 20, Source: `the request's "cost"`}, ex.Cost)
	require.True(t, ex.Limits[0].Result.Never, "20 is above the burst of 10")
	require.Contains(t, ex.Fields, [2]string{"RateLimit", `"burst";r=9;t=1, "daily";r=999;t=86390`})

	// Without explain, no "explain" member.
	r = e.post(t, "check", `{"rule":"search","key":"192.0.2.1"}`)
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.body, &m))
	require.NotContains(t, m, "explain")

	// Inline limits, an admin's.
	r = e.post(t, "check", `{"limits":[{"name":"m","strategy":"fixed","limit":5,"window":"1m"}],"key":"k","explain":true}`)
	require.Equal(t, 200, r.code, string(r.body))
	ex = r.decision(t).Explain
	require.Equal(t, &ExplainRuleJSON{Name: "inline", Why: []string{`the request's inline "limits" (an admin's)`}}, ex.Rule)
	require.Equal(t, "inline:k", ex.Key.Stored)

	// Not in batches.
	r = e.post(t, "batch", `{"items":[{"rule":"search","key":"k","explain":true}]}`)
	require.Equal(t, 400, r.code)
	require.Contains(t, string(r.body), "items[0].explain: explain is for check and peek")
}

// A rule with partition_key: explain shows the pk, never a secret.
func TestExplainPartitionKey(t *testing.T) {
	t.Setenv("RL_TEST_PK", "0123456789abcdef")
	e := newEnv(t, "partition_key_secret_env: RL_TEST_PK\nrules: [{name: r, strategy: fixed, limit: 5, window: 1m, partition_key: true}]", nil)
	r := e.post(t, "check", `{"rule":"r","key":"k","explain":true}`)
	ex := r.decision(t).Explain
	require.NotEmpty(t, ex.Key.PartitionKey)
	require.Contains(t, r.h.Get("RateLimit"), ";pk="+ex.Key.PartitionKey)
	require.NotContains(t, string(r.body), "0123456789abcdef")
}

// TestExplainRequest: how the proxy would answer a request, nothing
// decided: every rule tried, in order, and why it matches or not; the
// rule chosen; the key and cost as derived.
func TestExplainRequest(t *testing.T) {
	e := sampleEnv(t)
	hdr := func(kv ...string) pipeline.HeaderFunc {
		return func(n string) []string {
			var vs []string
			for i := 0; i+1 < len(kv); i += 2 {
				if strings.EqualFold(kv[i], n) {
					vs = append(vs, kv[i+1])
				}
			}
			return vs
		}
	}
	ex := e.svc.ExplainRequest(&pipeline.Request{Method: "get", Host: "API.example.com", Path: "/v1//search/", Header: hdr(), Peer: "192.0.2.9:5555"})
	require.Equal(t, &ExplainRequestJSON{Method: "get", Host: "API.example.com", Path: "/v1//search/", CanonicalPath: "/v1/search/",
		MatchHost: "api.example.com", MatchPath: "/v1/search/"}, ex.Request)
	byRule := map[string]ExplainCandidateJSON{}
	var order []string
	for _, c := range ex.Candidates {
		byRule[c.Rule] = c
		order = append(order, c.Rule)
	}
	// Most specific first: the longest endpoint, then file order.
	require.Equal(t, []string{"search", "export", "/v1/pay", "webhooks", "default"}, order)
	require.True(t, byRule["search"].Matches)
	require.Equal(t, []string{`path "/v1/search/" is below endpoint "/v1/search"`, "the rule matches every host", `method "GET" is one of GET`}, byRule["search"].Why)
	require.False(t, byRule["/v1/pay"].Matches)
	require.True(t, byRule["default"].Matches)
	require.Contains(t, byRule["default"].Why[len(byRule["default"].Why)-1], `not chosen: rule "search"`)
	require.Equal(t, "search", ex.Rule.Name)
	require.Equal(t, &ExplainKeyJSON{Source: "ip", Key: "192.0.2.9", Stored: "search:192.0.2.9"}, ex.Key)
	require.Equal(t, &ExplainCostJSON{Cost: 1, Source: "the rule's cost"}, ex.Cost)
	require.Len(t, ex.Limits, 2)
	require.Nil(t, ex.Limits[0].Result, "nothing decided")
	require.Contains(t, ex.Decision, "not decided: explain takes no decision")
	require.Equal(t, 0, e.mem.Len(), "nothing stored")

	// POST is not the search rule's method: the default rule decides.
	ex = e.svc.ExplainRequest(&pipeline.Request{Method: "POST", Host: "h", Path: "/v1/search", Header: hdr(), Peer: "192.0.2.9:1"})
	require.Equal(t, "default", ex.Rule.Name)
	require.False(t, byName(ex.Candidates, "search").Matches)
	require.Equal(t, `method "POST" is not one of GET`, last(byName(ex.Candidates, "search").Why))

	// An API key is shown as its digest, never itself; a bad cost header
	// is the proxy's 400.
	ex = e.svc.ExplainRequest(&pipeline.Request{Method: "POST", Host: "h", Path: "/v1/pay", Header: hdr("Authorization", "Bearer s3cret-token")})
	require.Equal(t, &ExplainKeyJSON{Source: "api_key", Key: pipeline.APIKeyDigest("s3cret-token"), Stored: "/v1/pay:" + pipeline.APIKeyDigest("s3cret-token")}, ex.Key)
	b, _ := json.Marshal(ex)
	require.NotContains(t, string(b), "s3cret-token")
	ex = e.svc.ExplainRequest(&pipeline.Request{Method: "GET", Host: "h", Path: "/v1/export", Header: hdr("X-Cost", "0"), Peer: "192.0.2.9:1"})
	require.Equal(t, "the X-Cost header", ex.Cost.Source)
	require.NotEmpty(t, ex.Cost.Error)
	require.Equal(t, "not decided: the proxy answers 400", ex.Decision)
	ex = e.svc.ExplainRequest(&pipeline.Request{Method: "GET", Host: "h", Path: "/v1/pay", Header: hdr()})
	require.Contains(t, ex.Key.Error, "no rate-limit key (api_key)")

	// A path the proxy refuses.
	ex = e.svc.ExplainRequest(&pipeline.Request{Method: "GET", Host: "h", Path: "/a%2Fb", Header: hdr()})
	require.NotEmpty(t, ex.Request.Error)
	require.Nil(t, ex.Rule)
	require.Contains(t, ex.Decision, "the proxy answers 400")
}

func byName(cs []ExplainCandidateJSON, name string) ExplainCandidateJSON {
	for _, c := range cs {
		if c.Rule == name {
			return c
		}
	}
	return ExplainCandidateJSON{}
}

func last(s []string) string { return s[len(s)-1] }

func readSample() ([]byte, error) { return os.ReadFile("../../../cmd/rl-wasm-host/sample.yaml") }

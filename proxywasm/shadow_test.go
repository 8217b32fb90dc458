package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

// TestFilterShadow: on shared data, a shadow limit is decided with the
// rule's enforced limit and never denies; it is in no field; its
// would-denies are counted; a rule of only shadow limits admits every
// request with no field.
func TestFilterShadow(t *testing.T) {
	host := emulate(t, `{"slots":16,"rules":[
		{"name":"s","endpoint":"/s","key_by":"header:x-user","limits":[
			{"name":"minute","strategy":"fixed","limit":3,"window":"1m"},
			{"name":"candidate","strategy":"fixed","limit":1,"window":"1m","shadow":true}]},
		{"name":"w","endpoint":"/w","key_by":"header:x-user","strategy":"gcra","limit":1,"window":"1h","shadow":true}]}`)
	for i := range 4 {
		act, local, resp := roundTrip(host, get("/s", [2]string{"x-user", "u"}))
		if i == 3 {
			if local == nil || local.StatusCode != 429 {
				t.Fatalf("request %d: %v %+v, want 429 by the enforced limit", i, act, local)
			}
			resp = local.Headers
		} else if act != types.ActionContinue || local != nil {
			t.Fatalf("request %d: %v %+v: a shadow limit never denies", i, act, local)
		}
		if got := headerValue(resp, "ratelimit-policy"); got != `"minute";q=3;w=60` {
			t.Errorf("request %d: RateLimit-Policy %q", i, got)
		}
		if got := headerValue(resp, "ratelimit"); got == "" || strings.Contains(got, "candidate") {
			t.Errorf("request %d: RateLimit %q", i, got)
		}
	}
	for i := range 3 {
		act, local, resp := roundTrip(host, get("/w", [2]string{"x-user", "u"}))
		if act != types.ActionContinue || local != nil {
			t.Fatalf("only shadow, request %d: %v %+v", i, act, local)
		}
		for _, f := range []string{"ratelimit", "ratelimit-policy", "x-ratelimit-limit", "retry-after"} {
			if v := headerValue(resp, f); v != "" {
				t.Errorf("only shadow, request %d: %s %q", i, f, v)
			}
		}
	}
	for name, want := range map[string]uint64{shadowMetric("s", "candidate"): 2, shadowMetric("w", "w"): 2} {
		if n, err := host.GetCounterMetric(name); err != nil || n != want {
			t.Errorf("metric %s: %d %v, want %d", name, n, err, want)
		}
	}
}

// TestFilterShadowGlobal: a global rule's inline limits carry their shadow
// flags to the service, and a shadow limit of its answer is in no field.
func TestFilterShadowGlobal(t *testing.T) {
	host := emulate(t, `{"rules":[{"name":"g","endpoint":"/g","key_by":"header:x-user","limits":[
		{"name":"minute","strategy":"fixed","limit":3,"window":"1m"},
		{"name":"candidate","strategy":"fixed","limit":1,"window":"1m","shadow":true}],
		"global":{"cluster":"rl_service"}}]}`)
	id := host.InitializeHttpContext()
	if act := host.CallOnRequestHeaders(id, get("/g", [2]string{"x-user", "u"}), true); act != types.ActionPause {
		t.Fatalf("%v, want pause for the callout", act)
	}
	c := host.GetCalloutAttributesFromContext(id)[0]
	var body struct{ Limits []map[string]any }
	if err := json.Unmarshal(c.Body, &body); err != nil || len(body.Limits) != 2 || body.Limits[1]["shadow"] != true || body.Limits[0]["shadow"] != nil {
		t.Fatalf("callout body %s (%v)", c.Body, err)
	}
	host.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", "200"}}, nil, []byte(`{"allowed":true,"limit_name":"minute","limit":3,"remaining":1,"window_ms":60000,"reset_after_ms":50000,
		"limits":[{"name":"minute","allowed":true,"limit":3,"remaining":1,"window_ms":60000,"reset_after_ms":50000,"next_after_ms":50000},
		          {"name":"candidate","allowed":false,"shadow":true,"limit":1,"remaining":0,"window_ms":60000,"reset_after_ms":50000,"retry_after_ms":50000,"next_after_ms":50000}]}`))
	if act := host.GetCurrentHttpStreamAction(id); act != types.ActionContinue {
		t.Fatalf("after 200: %v", act)
	}
	host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false)
	resp := host.GetCurrentResponseHeaders(id)
	if got := headerValue(resp, "ratelimit-policy"); got != `"minute";q=3;w=60` {
		t.Errorf("RateLimit-Policy %q", got)
	}
	if n, err := host.GetCounterMetric(shadowMetric("g", "candidate")); err != nil || n != 1 {
		t.Errorf("metric: %d %v, want 1", n, err)
	}
}

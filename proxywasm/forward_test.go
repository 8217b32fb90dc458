package main

import (
	"testing"
)

// TestFilterForwardsWhatItMatched: the filter forwards a request as
// rl-wasm-host's proxy does, so that the upstream serves the request that
// was matched. The proxy drops X-Original-URL and X-Rewrite-URL (IIS URL
// Rewrite, Symfony and Zend serve the path they name); the filter used to
// let both through: "/public" with X-Original-URL: /admin was matched
// (unlimited) as /public and served as /admin. The list is
// pipeline.PathOverrideFields, dropped in any spelling ('-' and '_' alike,
// as PHP reads them); and the :path forwarded is the canonical form the
// rule was matched on, as the proxy forwards it.
func TestFilterForwardsWhatItMatched(t *testing.T) {
	host := emulate(t, `{"rules":[{"name":"admin","endpoint":"/admin","strategy":"fixed","limit":1,"window":"1m","key_by":"global"}]}`)
	for _, f := range []string{"x-original-url", "x-rewrite-url", "x_original_url", "x-rewrite_url"} {
		id := host.InitializeHttpContext()
		host.CallOnRequestHeaders(id, get("/public", [2]string{f, "/admin"}), true)
		if local := host.GetSentLocalResponse(id); local != nil {
			t.Fatalf("%s: answered %d", f, local.StatusCode)
		}
		if v := headerValue(host.GetCurrentRequestHeaders(id), f); v != "" {
			t.Errorf("%s: %q forwarded to the upstream beside :path /public (the proxy drops it)", f, v)
		}
	}
	for _, c := range []struct{ sent, forwarded string }{
		{"/public?x=1", "/public?x=1"},
		{"/x/../public//a?q=%2e", "/public/a?q=%2e"},
		{"/%70ublic;p=1", "/public;p=1"},
		{"/Admin/../ADMIN", "/ADMIN"}, // matched as /admin, forwarded in the client's case, as the proxy does
	} {
		id := host.InitializeHttpContext()
		host.CallOnRequestHeaders(id, get(c.sent), true)
		if got := headerValue(host.GetCurrentRequestHeaders(id), ":path"); got != c.forwarded {
			t.Errorf("%s: forwarded %q, want %q", c.sent, got, c.forwarded)
		}
	}
	// The last one was /admin's one request: the next is denied.
	id := host.InitializeHttpContext()
	host.CallOnRequestHeaders(id, get("/./admin"), true)
	if local := host.GetSentLocalResponse(id); local == nil || local.StatusCode != 429 {
		t.Errorf("/./admin after the limit: %+v, want 429", local)
	}
}

// TestFilterDropsTheResponseCostField: a client's own request field named
// like its rule's response_cost_header, in any case and spelling of '-'
// and '_', never reaches the upstream (pipeline.DropsField, as the proxy
// drops it): an upstream echoing request fields, or reading X_Cost_Actual
// as HTTP_X_COST_ACTUAL, would report the client's cost as its own.
// Before, it was forwarded. A request no such rule matched keeps it.
func TestFilterDropsTheResponseCostField(t *testing.T) {
	host := emulate(t, `{"rules":[{"name":"llm","endpoint":"/llm","strategy":"fixed","limit":100,"window":"1m","key_by":"global",
		"response_cost_header":"X-Cost-Actual"}]}`)
	for _, f := range []string{"x-cost-actual", "x_cost_actual", "x-cost_actual", "X-COST-ACTUAL"} {
		id := host.InitializeHttpContext()
		host.CallOnRequestHeaders(id, get("/llm", [2]string{f, "1"}, [2]string{"x-other", "1"}), true)
		if local := host.GetSentLocalResponse(id); local != nil {
			t.Fatalf("%s: answered %d", f, local.StatusCode)
		}
		hs := host.GetCurrentRequestHeaders(id)
		if v := headerValue(hs, f); v != "" {
			t.Errorf("%s: %q forwarded to the upstream", f, v)
		}
		if headerValue(hs, "x-other") != "1" {
			t.Errorf("%s: another field dropped", f)
		}
		host.CompleteHttpContext(id)
	}
	id := host.InitializeHttpContext()
	host.CallOnRequestHeaders(id, get("/other", [2]string{"x-cost-actual", "1"}), true)
	if headerValue(host.GetCurrentRequestHeaders(id), "x-cost-actual") != "1" {
		t.Error("dropped from a request no rule with response_cost_header matched")
	}
}

package main

import (
	"testing"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

// TestFilterGlobalOverloadIsLoad: in global mode an answer that Envoy or a
// gateway gives for load is refused on a fail_open rule, never admitted.
// Every 502/503 without rl-wasm-host's JSON used to be read as the service
// unreachable, an outage at once; but Envoy's circuit breakers on the
// rl-wasm-host cluster (max_requests, max_pending_requests: 1024 by
// default) answer a JSON-less 503 too, "upstream connect error or
// disconnect/reset before headers. reset reason: overflow", with
// x-envoy-overloaded: true. A flood through the filter that overflowed the
// breaker was admitted by fail_open. outage.ClassifyHTTP maps the mark, and
// a 429 that is not rl-wasm-host's decision, to load.
func TestFilterGlobalOverloadIsLoad(t *testing.T) {
	for name, answer := range map[string][][2]string{
		"circuit breaker overflow": {{":status", "503"}, {"x-envoy-overloaded", "true"}, {"content-type", "text/plain"}},
		"overloaded 502":           {{":status", "502"}, {"x-envoy-overloaded", "true"}},
		"429 without a decision":   {{":status", "429"}, {"content-type", "text/plain"}},
	} {
		t.Run(name, func(t *testing.T) { testGlobalRefused(t, answer) })
	}
}

// testGlobalRefused: a fail_open global rule whose callout gets answer is
// refused 503 with Retry-After.
func testGlobalRefused(t *testing.T, answer [][2]string) {
	host := emulate(t, `{"rules":[{"name":"named","endpoint":"/n","strategy":"fixed","limit":1,"window":"1s","key_by":"header:x-user","fail_open":true,
		"global":{"cluster":"rl_service","rule":"login"}}]}`)
	id := host.InitializeHttpContext()
	if act := host.CallOnRequestHeaders(id, get("/n", [2]string{"x-user", "bob"}), true); act != types.ActionPause {
		t.Fatalf("%v, want pause", act)
	}
	c := host.GetCalloutAttributesFromContext(id)[0]
	host.CallOnHttpCallResponse(c.CalloutID, answer, nil,
		[]byte("upstream connect error or disconnect/reset before headers. reset reason: overflow"))
	if local := host.GetSentLocalResponse(id); local == nil || local.StatusCode != 503 || headerValue(local.Headers, "retry-after") != "1" {
		t.Errorf("on a fail_open rule: %+v, action %v; want refused 503 with Retry-After (load is never admitted)",
			local, host.GetCurrentHttpStreamAction(id))
	}
}

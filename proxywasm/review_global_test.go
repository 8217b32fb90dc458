package main

import (
	"testing"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

// Review: in global mode every 502/503 without rl-wasm-host's JSON is read
// as "the service unreachable", an outage at once, which a fail_open rule
// admits. But Envoy answers a callout 503 without JSON for load too: its
// circuit breakers on the rl-wasm-host cluster (max_requests,
// max_pending_requests: 1024 by default) answer "upstream connect error or
// disconnect/reset before headers. reset reason: overflow" with
// x-envoy-overloaded: true. So a flood of requests through the filter that
// overflows the cluster's breaker is admitted by fail_open: load turned
// into admissions, which outage.Classify forbids (store.ErrBusy).
func TestReviewGlobalOverflowIsLoad(t *testing.T) {
	host := emulate(t, `{"rules":[{"name":"named","endpoint":"/n","strategy":"fixed","limit":1,"window":"1s","key_by":"header:x-user","fail_open":true,
		"global":{"cluster":"rl_service","rule":"login"}}]}`)
	id := host.InitializeHttpContext()
	if act := host.CallOnRequestHeaders(id, get("/n", [2]string{"x-user", "bob"}), true); act != types.ActionPause {
		t.Fatalf("%v, want pause", act)
	}
	c := host.GetCalloutAttributesFromContext(id)[0]
	host.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", "503"}, {"x-envoy-overloaded", "true"}, {"content-type", "text/plain"}}, nil,
		[]byte("upstream connect error or disconnect/reset before headers. reset reason: overflow"))
	if local := host.GetSentLocalResponse(id); local == nil || local.StatusCode != 503 {
		t.Fatalf("Envoy's circuit-breaker overflow (load) on a fail_open rule: %+v, action %v; want refused 503 (load is never admitted)",
			local, host.GetCurrentHttpStreamAction(id))
	}
}

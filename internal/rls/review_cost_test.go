package rls

import (
	"context"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rlcore/rl/core"
)

// Review: the gRPC front end checks a descriptor's cost itself
// (parseDescriptor) and answers a hits_addend above core.MaxCost with a
// gRPC error (INVALID_ARGUMENT) instead of a decision. Envoy's rate limit
// filter answers any error of the service by failure_mode_deny, false by
// default: the request is let through. Envoy can take hits_addend from a
// request header (SECURITY.md says so for hits_addend 0), so a client
// sending a cost of 2^41 on an exhausted limit is admitted. pipeline's cost
// rule refuses a bad cost (400); here a bad cost must be OVER_LIMIT.
func TestReviewHugeHitsAddendIsAnError(t *testing.T) {
	e := newEnv(t, hitsYAML, envOpts{})
	for range 10 {
		e.call(t, "d", d("k", "a"))
	}
	require := func(ok bool, f string, a ...any) {
		t.Helper()
		if !ok {
			t.Errorf(f, a...)
		}
	}
	require(e.call(t, "d", d("k", "a")).OverallCode == OVER, "exhausted")
	huge := d("k", "a")
	huge.HitsAddend = wrapperspb.UInt64(uint64(core.MaxCost) + 1)
	resp, err := e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{huge}})
	require(err == nil && resp.GetOverallCode() == OVER,
		"hits_addend %d on an exhausted limit: %v, %v; want OVER_LIMIT (an error is Envoy's failure_mode_deny: allowed by default)", uint64(core.MaxCost)+1, resp.GetOverallCode(), err)
}

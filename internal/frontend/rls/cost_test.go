package rls

import (
	"context"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rlcore/rl/core"
)

// TestHugeHitsAddendIsOverLimit: a hits_addend the one cost rule refuses
// (pipeline.CheckCost: above core.MaxCost) is answered OVER_LIMIT, never
// with a gRPC error. Envoy's rate limit filter answers any error of the
// service by failure_mode_deny, false by default: the request is let
// through. Envoy can take hits_addend from a request header, so a client
// sending a cost of 2^40+1 on an exhausted limit was admitted (the service
// answered INVALID_ARGUMENT).
func TestHugeHitsAddendIsOverLimit(t *testing.T) {
	e := newEnv(t, hitsYAML, envOpts{})
	for range 10 {
		e.call(t, "d", d("k", "a"))
	}
	require.Equal(t, OVER, e.call(t, "d", d("k", "a")).OverallCode, "exhausted")
	huge := func(k, v string, n uint64) *commonv3.RateLimitDescriptor {
		x := d(k, v)
		x.HitsAddend = wrapperspb.UInt64(n)
		return x
	}
	for name, descs := range map[string][]*commonv3.RateLimitDescriptor{
		"exhausted":   {huge("k", "a", uint64(core.MaxCost)+1)},
		"fresh":       {huge("j", "fresh", uint64(core.MaxCost)+1)},
		"largest":     {huge("j", "fresh", 1<<64-1)},
		"summed over": {huge("j", "sum", uint64(core.MaxCost)), huge("j", "sum", 1)},
	} {
		resp, err := e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: descs})
		require.NoError(t, err, "%s: an error is Envoy's failure_mode_deny: allowed by default", name)
		require.Equal(t, OVER, resp.GetOverallCode(), name)
		require.Equal(t, OVER, resp.GetStatuses()[0].GetCode(), name)
	}
	// Nothing was charged: the fresh key has its whole limit.
	r := e.call(t, "d", d("j", "fresh"))
	require.Equal(t, OK, r.OverallCode)
	require.Equal(t, uint32(9), r.Statuses[0].LimitRemaining)
}

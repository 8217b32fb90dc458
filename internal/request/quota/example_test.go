package quota_test

import (
	"fmt"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/quota"
)

// Two clients share 100 requests per second: the second is granted its
// half only once the first has reported after its cut.
func ExampleNewBucket() {
	lim, _ := quota.FromCore(core.Limit{Algorithm: core.TokenBucket, Limit: 100, Window: quota.Second, Rate: 100})
	b, _ := quota.NewBucket(lim, quota.Config{})
	now := int64(1_700_000_000) * quota.Second
	show := func(acts []quota.Action) {
		for _, a := range acts {
			fmt.Printf("%s: %d per %ds, %d tokens\n", a.Client, a.Grant.Fill, lim.FillInterval/quota.Second, a.Grant.Tokens)
		}
	}
	b.Report("envoy-a", 0, 0, 1, now)
	show(b.Step(now))
	b.Report("envoy-b", 0, 0, 1, now)
	show(b.Step(now)) // a is cut; b waits
	now += 5 * quota.Second
	b.Report("envoy-a", 0, 250, 0, now)
	show(b.Step(now)) // a's report acknowledges the cut: b is raised
	// Output:
	// envoy-a: 6000 per 60s, 75 tokens
	// envoy-a: 3000 per 60s, 37 tokens
	// envoy-a: 3000 per 60s, 37 tokens
	// envoy-b: 3000 per 60s, 37 tokens
}

package quotaclient_test

import (
	"context"
	"fmt"
	"time"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/quotaclient"
	"github.com/rlcore/rl/store"
)

// A client for one RLQS server and one bucket, and a store deciding on it:
// until an assignment arrives, the fallback (here 5 requests a second on
// this replica) decides. The server's address is an example: nothing
// listens there, so the fallback decides.
func ExampleNew() {
	c, err := quotaclient.New(quotaclient.Config{Address: "127.0.0.1:1", Domain: "rl-wasm-host", ReportInterval: time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	b, err := c.Bucket(quotaclient.BucketSpec{
		ID:         map[string]string{"name": "api"},
		Ceiling:    core.Limit{Algorithm: core.TokenBucket, Limit: 40, Rate: 100, Window: 1_000_000}, // the global limit
		Fallback:   &core.Limit{Algorithm: core.TokenBucket, Limit: 5, Rate: 5, Window: 1_000_000},
		RetryAfter: 1_000_000,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	s := quotaclient.Store{B: b}
	p := store.MustPolicy([]string{"global"}, core.Limit{Algorithm: core.TokenBucket, Limit: 40, Rate: 100, Window: 1_000_000})
	admitted := 0
	for range 10 {
		_, d, err := s.Decide(context.Background(), store.Request{Policy: p, Prefix: "api", Key: "k", Op: store.Take, Now: 1_700_000_000_000_000, Cost: 1}, nil)
		if err == nil && d.Allowed {
			admitted++
		}
	}
	fmt.Println("admitted without an assignment:", admitted)
	// Output: admitted without an assignment: 5
}

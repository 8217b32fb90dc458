package rl_test

import (
	"context"
	"fmt"
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
)

func Example() {
	// 10 requests a minute per user, plus at most 3 at once.
	policy := rl.MustPolicy(
		rl.Limit{Name: "minute", Algorithm: core.SlidingWindow, Limit: 10, Window: time.Minute},
		rl.Limit{Name: "burst", Algorithm: core.GCRA, Limit: 3, Window: time.Second, Rate: 1},
	)
	lim, err := rl.New(rl.Config{Policy: policy, BaseKey: "api"})
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	for i := range 4 {
		res, err := lim.Allow(context.Background(), "user:42")
		if err != nil {
			panic(err) // an invalid key or a store failure, never a denial
		}
		fmt.Printf("request %d: allowed=%v limit=%s remaining=%d\n", i+1, res.Allowed, res.Name, res.Remaining)
	}
	// Output:
	// request 1: allowed=true limit=burst remaining=2
	// request 2: allowed=true limit=burst remaining=1
	// request 3: allowed=true limit=burst remaining=0
	// request 4: allowed=false limit=burst remaining=0
}

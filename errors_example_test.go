package rl_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
)

// NewPolicy's errors name the limit, the parameter at fault, its value and
// the range allowed, in the words SQL and the configuration checker use;
// match them with errors.Is or errors.As, not by their text.
func ExampleNewPolicy_errors() {
	for _, l := range []rl.Limit{
		{Algorithm: core.FixedWindow, Window: time.Minute}, // no limit
		{Algorithm: core.TokenBucket, Limit: 10},           // no window
		{Algorithm: core.TokenBucket, Limit: 10, Window: time.Minute, Rate: -1},
	} {
		_, err := rl.NewPolicy(l)
		fmt.Println(err)
		var le *core.LimitError
		if errors.As(err, &le) && errors.Is(err, core.ErrRate) {
			fmt.Printf("  %s %d: allowed [%d, %d]\n", le.Field, le.Value, le.Min, le.Max)
		}
	}
	// Output:
	// rl: invalid policy: limit "default": ratelimit: limit 0: outside [1, 1099511627776] for fixed_window
	// rl: invalid policy: limit "default": ratelimit: window 0 µs: outside [1, 1000000000000000] µs
	// rl: invalid policy: limit "default": ratelimit: rate -1: outside [0, 1099511627776] for token_bucket
	//   rate -1: allowed [0, 1099511627776]
}

// A Limiter without Config.Policy decides only calls that bring their own
// policy (Do with Request.Policy): a free plan and a paid plan over one
// Limiter. A call that names no policy fails with ErrNoPolicy, which says
// what to set.
func ExampleNew_perCallPolicies() {
	free := rl.MustPolicy(rl.Limit{Name: "free", Algorithm: core.TokenBucket, Limit: 1, Window: time.Minute})
	paid := rl.MustPolicy(rl.Limit{Name: "paid", Algorithm: core.TokenBucket, Limit: 100, Window: time.Minute})
	lim, err := rl.New(rl.Config{}) // no default policy
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	ctx := context.Background()
	for _, p := range []*rl.Policy{free, free, paid} {
		res, err := lim.Do(ctx, rl.Request{Key: "acct:7", Cost: 1, Policy: p})
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: allowed=%v\n", res.Name, res.Allowed)
	}
	_, err = lim.Allow(ctx, "acct:7")
	fmt.Println(errors.Is(err, rl.ErrNoPolicy), err)
	// Output:
	// free: allowed=true
	// free: allowed=false
	// paid: allowed=true
	// true rl: no policy: set Config.Policy, or pass Request.Policy to Do (ResetPolicy for Reset)
}

package rl_test

import (
	"context"
	"errors"
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

// Wait blocks until the key may proceed, as x/time/rate's Limiter.Wait does:
// here a burst of 2, then one every 10 ms.
func ExampleLimiter_Wait() {
	policy := rl.MustPolicy(rl.Limit{Algorithm: core.GCRA, Limit: 2, Window: 10 * time.Millisecond, Rate: 1})
	lim, err := rl.New(rl.Config{Policy: policy, Clock: rl.SystemClock})
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	for i := range 4 {
		if _, err := lim.Wait(ctx, "worker:1"); err != nil {
			panic(err) // ctx done, an invalid key, a store failure, ErrNever or ErrWaitDeadline
		}
		fmt.Printf("job %d\n", i+1)
	}
	fmt.Println("at least 20ms:", time.Since(start) >= 20*time.Millisecond)

	// A cost that can never fit fails at once instead of waiting forever.
	_, err = lim.WaitN(ctx, "worker:1", 3)
	fmt.Println(errors.Is(err, rl.ErrNever))
	// Output:
	// job 1
	// job 2
	// job 3
	// job 4
	// at least 20ms: true
	// true
}

// Reserve takes now and tells how long to hold the call: a leaky bucket of
// 5 per second spaces admitted calls 200 ms apart (shaping instead of
// rejecting).
func ExampleLimiter_Reserve() {
	policy := rl.MustPolicy(rl.Limit{Algorithm: core.LeakyBucket, Limit: 5, Window: time.Second})
	lim, err := rl.New(rl.Config{Policy: policy})
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	ctx := context.Background()
	for i := range 3 {
		res, err := lim.Reserve(ctx, "sender:7")
		if err != nil {
			panic(err)
		}
		fmt.Printf("message %d: reserved=%v, send after ~%s\n", i+1, res.Allowed, res.Delay.Round(100*time.Millisecond))
		// res.Wait(ctx) would sleep until then.
	}
	// Output:
	// message 1: reserved=true, send after ~0s
	// message 2: reserved=true, send after ~200ms
	// message 3: reserved=true, send after ~400ms
}

// A shadow limit runs a candidate beside the enforced limit, on the same
// key: it never denies, and its result says what it would have done.
func ExampleLimit_shadow() {
	policy := rl.MustPolicy(
		rl.Limit{Name: "minute", Algorithm: core.FixedWindow, Limit: 3, Window: time.Minute},
		rl.Limit{Name: "candidate", Algorithm: core.FixedWindow, Limit: 2, Window: time.Minute, Shadow: true},
	)
	lim, err := rl.New(rl.Config{Policy: policy})
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	each := make([]rl.LimitResult, policy.Len())
	for i := range 4 {
		res, err := lim.Do(context.Background(), rl.Request{Key: "user:42", Cost: 1, Each: each})
		if err != nil {
			panic(err)
		}
		fmt.Printf("request %d: allowed=%v by %s; candidate would deny: %v\n", i+1, res.Allowed, res.Name, !each[1].Allowed)
	}
	// Output:
	// request 1: allowed=true by minute; candidate would deny: false
	// request 2: allowed=true by minute; candidate would deny: false
	// request 3: allowed=true by minute; candidate would deny: true
	// request 4: allowed=false by minute; candidate would deny: true
}

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
	// A clock held still, so that the delays printed are exact however long
	// the calls take; leave Clock out to use the real time.
	still := time.Now().UnixMicro()
	lim, err := rl.New(rl.Config{Policy: policy, Clock: func() int64 { return still }})
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

// Settle charges the real cost of a call once it is known: here an LLM
// endpoint limited to 1,000 tokens a minute takes an estimate of 100
// tokens per request and settles the tokens the model actually used. A
// response that used more puts the key in debt; the next request is
// denied until the debt is paid off.
func ExampleLimiter_Settle() {
	policy := rl.MustPolicy(rl.Limit{Name: "tokens", Algorithm: core.TokenBucket, Limit: 1000, Window: time.Minute})
	lim, err := rl.New(rl.Config{Policy: policy, Clock: func() int64 { return 1_767_225_600_000_000 }})
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	ctx := context.Background()
	const estimate = 100
	for _, used := range []int64{40, 1500} {
		res, err := lim.AllowN(ctx, "user:42", estimate)
		if err != nil || !res.Allowed {
			fmt.Println("denied", res.RetryAfter, err)
			continue
		}
		res, err = lim.Settle(ctx, "user:42", used-estimate)
		if err != nil {
			panic(err)
		}
		fmt.Printf("used %d tokens: %d left\n", used, res.Remaining)
	}
	res, _ := lim.AllowN(ctx, "user:42", estimate)
	fmt.Printf("next request allowed=%v, retry after %v\n", res.Allowed, res.RetryAfter)
	// Output:
	// used 40 tokens: 960 left
	// used 1500 tokens: 0 left
	// next request allowed=false, retry after 38.4s
}

// A changed limit takes effect at the next call, on the units the key has
// used: state is kept per key and limit name, so a key moved from the free
// policy to the paid one (a limit of the same name) carries its usage.
func ExamplePolicy_carry() {
	free := rl.MustPolicy(rl.Limit{Name: "day", Algorithm: core.GCRA, Limit: 100, Window: 24 * time.Hour})
	paid := rl.MustPolicy(rl.Limit{Name: "day", Algorithm: core.GCRA, Limit: 1000, Window: 24 * time.Hour})
	lim, err := rl.New(rl.Config{Clock: func() int64 { return 1_767_225_600_000_000 }})
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	ctx := context.Background()
	res, _ := lim.Do(ctx, rl.Request{Key: "k", Cost: 100, Policy: free})
	fmt.Println("free:", res.Allowed, res.Remaining)
	res, _ = lim.Do(ctx, rl.Request{Key: "k", Cost: 1, Policy: free})
	fmt.Println("free, exhausted:", res.Allowed, res.RetryAfter)
	res, _ = lim.Do(ctx, rl.Request{Key: "k", Cost: 1, Policy: paid})
	fmt.Println("paid, at once:", res.Allowed, res.Remaining)
	res, _ = lim.Do(ctx, rl.Request{Key: "k", Cost: 1, Policy: free})
	fmt.Println("back to free:", res.Allowed, res.RetryAfter) // the 101 used count as free's 100
	// Output:
	// free: true 0
	// free, exhausted: false 14m24s
	// paid, at once: true 899
	// back to free: false 14m24s
}

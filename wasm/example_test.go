package wasm_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/wasm"
)

func Example() {
	ctx := context.Background()
	p, err := wasm.New(ctx, wasm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(ctx)

	// Two requests per second, as a token bucket.
	limits := []core.Limit{{Algorithm: core.TokenBucket, Limit: 2, Window: 1_000_000}}
	states := make([]core.State, 1) // a store would load and save these
	decisions := make([]core.Decision, 1)
	now := int64(1767225600000000) // µs since the epoch
	for range 3 {
		if _, err := p.TakeAll(limits, states, now, 1, decisions); err != nil {
			log.Fatal(err)
		}
		d := decisions[0]
		fmt.Printf("allowed=%v remaining=%d retry_after=%dµs\n", d.Allowed, d.Remaining, d.RetryAfter)
	}

	// Errors are the core's.
	_, _, err = p.Take(core.Limit{Algorithm: core.GCRA, Limit: 0, Window: 1}, core.State{}, now, 1)
	fmt.Println(errors.Is(err, core.ErrLimit))
	// Output:
	// allowed=true remaining=1 retry_after=0µs
	// allowed=true remaining=0 retry_after=0µs
	// allowed=false remaining=0 retry_after=500000µs
	// true
}

// A Pool is a core.Decider: stores take it in place of core.Native
// (memstore.Config.Decider, pgstore.Config.Decider).
func ExamplePool_decider() {
	ctx := context.Background()
	p, err := wasm.New(ctx, wasm.Config{MaxInstances: 4})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(ctx)

	var d core.Decider = p
	limits := []core.Limit{
		{Algorithm: core.TokenBucket, Limit: 10, Window: 1_000_000},        // burst
		{Algorithm: core.FixedWindow, Limit: 1000, Window: 86_400_000_000}, // daily
	}
	states := make([]core.State, 2)
	decisions := make([]core.Decision, 2)
	i, err := d.TakeAll(limits, states, 1767225600000000, 4, decisions)
	fmt.Println(i, err, decisions[i].Remaining)
	// Output:
	// 0 <nil> 6
}

// A Handoff serves at once: the native core decides while the module
// compiles in the background, then the module takes over, deciding the
// states the native core wrote exactly as it would have.
func ExampleNewHandoff() {
	h := wasm.NewHandoff(wasm.HandoffConfig{
		OnDone: func(took time.Duration, err error) {
			if err != nil {
				log.Printf("the module did not start (the native core keeps deciding): %v", err)
			}
		},
	})
	defer h.Close(context.Background())

	limits := []core.Limit{{Algorithm: core.FixedWindow, Limit: 3, Window: 60_000_000}}
	states := make([]core.State, 1)
	decisions := make([]core.Decision, 1)
	now := int64(1767225600000000)
	h.TakeAll(limits, states, now, 1, decisions) // decided at once, natively if the module is compiling
	fmt.Println(decisions[0].Remaining)

	<-h.Ready()
	fmt.Println(h.Deciding(), h.Err())
	h.TakeAll(limits, states, now, 1, decisions) // the module continues the count
	fmt.Println(decisions[0].Remaining)
	// Output:
	// 2
	// wasm <nil>
	// 1
}

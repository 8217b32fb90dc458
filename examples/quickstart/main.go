// Command quickstart is the Go quick start of the project's README: a
// limiter of 3 requests at once and 10 a minute per user, in memory.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
)

func main() {
	policy := rl.MustPolicy(
		rl.Limit{Name: "minute", Algorithm: core.SlidingWindow, Limit: 10, Window: time.Minute},
		rl.Limit{Name: "burst", Algorithm: core.GCRA, Limit: 3, Window: time.Second, Rate: 1},
	)
	lim, err := rl.New(rl.Config{Policy: policy}) // the in-memory store
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()

	for i := 1; i <= 4; i++ {
		res, err := lim.Allow(context.Background(), "user:42")
		if err != nil {
			log.Fatal(err) // an invalid key or a store failure: never a denial
		}
		fmt.Printf("request %d: allowed=%v by=%s remaining=%d", i, res.Allowed, res.Name, res.Remaining)
		if !res.Allowed {
			fmt.Printf(" retry_after=%v", (res.RetryAfter + time.Second - 1).Truncate(time.Second)) // whole seconds, rounded up, as Retry-After
		}
		fmt.Println()
	}
}

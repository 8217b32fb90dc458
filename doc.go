// Package rl is a rate limiter whose one decision core (package core) runs
// natively, as a WebAssembly module and as PostgreSQL functions, with
// identical results; this package is its Go API.
//
// A Limiter decides keys against a Policy (one or more limits, all or
// nothing) over a store.Store: the in-memory memstore (the default) or
// PostgreSQL through pgstore. Time comes from Config.Clock, microseconds
// since the Unix epoch.
//
//	lim, err := rl.New(rl.Config{
//		Policy: rl.MustPolicy(rl.Limit{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second}),
//	})
//	res, err := lim.Allow(ctx, "user:42")
//	if err != nil { /* invalid key or store failure */ }
//	if !res.Allowed { /* deny; retry after res.RetryAfter */ }
//
// # Results and errors
//
// Denial is a Result with Allowed false, never an error. Errors are: an
// invalid key (ErrInvalidKey, *KeyError), invalid limits or cost (a
// core.Error such as core.ErrCost), no policy (ErrNoPolicy), or a failure of
// the store (matches ErrStore; transient failures also match
// store.ErrUnavailable). Middleware can fail open or closed on ErrStore only.
//
// # Clock
//
// The default clock is a coarse one shared by the process: a background
// goroutine advances an atomic microsecond counter every millisecond while
// the clock is being read, so a reading costs an atomic load instead of a
// time.Now call (BENCHMARKS.md has both), and lags real time by at most about a
// millisecond (always in the conservative direction: a late clock never
// admits early). It follows the monotonic clock, so wall-clock steps do not
// move it. Use SystemClock for microsecond precision, or inject your own.
//
// A Limiter is safe for concurrent use.
package rl

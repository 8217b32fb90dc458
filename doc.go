// Package rl is a rate limiter whose one decision core (package core) runs
// natively, as a WebAssembly module and as PostgreSQL functions, with
// identical results; this package is its Go API.
//
// A Limiter decides keys against a Policy (one or more limits, all or
// nothing) over a store.Store: the in-memory memstore (the default) or
// PostgreSQL through pgstore. Time comes from Config.Clock, microseconds
// since the Unix epoch. A limit may be a shadow limit (Limit.Shadow): a
// candidate decided in the same atomic step as the enforced limits, charged
// only when the call is admitted and it would admit the cost, that never
// denies and reports its would-denies in the per-limit results
// (Request.Each).
//
//	lim, err := rl.New(rl.Config{
//		Policy: rl.MustPolicy(rl.Limit{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second}),
//	})
//	res, err := lim.Allow(ctx, "user:42")
//	if err != nil { /* invalid key or store failure */ }
//	if !res.Allowed { /* deny; retry after res.RetryAfter */ }
//
// # Layers
//
// Each layer builds on the one below it (rl_allow() in SQL calls the
// PL/pgSQL port directly, with no store in between):
//
//	core        the pure decision function: limits, states, a time, a cost in;
//	            decisions and new states out (no clock, I/O or allocation)
//	deciders    who computes it (core.Decider): core.Native{}; the WebAssembly
//	            build hosted by wazero (package wasm); the PL/pgSQL port
//	            (sql/migrations), all held equal by tests/vectors
//	stores      an atomic read-modify-write of one key's states with the
//	            store's decider applied inside (store.Store): memstore (in
//	            memory), pgstore (PostgreSQL rows under SELECT ... FOR UPDATE;
//	            ModeSQL decides in PL/pgSQL, ModeGo with a Go or WebAssembly
//	            decider; Batched coalesces; Sharded spreads keys), failover
//	            (PostgreSQL with memory behind a breaker)
//	limiter     this package's Limiter (keys, policies, Wait, Reserve): the
//	            Go API, and the compiled policy every other front end decides
//	            with
//	request     what every front end of rl-wasm-host and the middleware share
//	            (internal/request/...): the decision engine (per-key bound,
//	            store call, outage detector, one failure rule, one outcome
//	            vocabulary), the request pipeline (path, host, key, cost,
//	            match, overrides, answer fields), the rule configuration and
//	            the net/http flow
//	front ends  thin adapters that import no other front end: the net/http
//	            middleware (httplimit); rl-wasm-host's decision API and proxy
//	            (internal/frontend/service) and Envoy's gRPC rate limit
//	            service (internal/frontend/rls) and quota server
//	            (internal/frontend/rlqs); the proxy-wasm filter; and
//	            rl_allow() in SQL and triggers
//
// No package imports one of a layer above its own, and a folder holds one
// layer (internal/frontend, internal/request, internal/testkit,
// internal/util for the utilities); tests/layers holds every import of the
// module to that (and says which import breaks which rule).
// ARCHITECTURE.md draws the layers, the flow of a request and of a
// configuration value.
//
// The decider is chosen with the store (memstore.Config.Decider,
// pgstore.Config.Mode and Decider), once, not per call. A Policy is checked
// and compiled once, by NewPolicy (core.Compile for each limit, a
// store.Policy for the names and limits); every call hands the store that
// compiled policy and the key (a store.Request of eight words), never its
// limits again.
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

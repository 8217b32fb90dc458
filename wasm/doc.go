// Package wasm runs the rate-limiting core compiled to WebAssembly, the
// embedded module rl.wasm, under wazero, as a core.Decider.
//
// The module is package core built for GOOS=wasip1 behind a thin export
// layer (./guest); its interface, for this package and for any other host
// (Node.js, a browser, another runtime), is documented in ABI.md. This
// package is the Go host: it decides bit for bit what the native core
// decides, which the conformance vectors and a differential fuzz test check.
//
//	p, err := wasm.New(ctx, wasm.Config{})
//	if err != nil { ... }
//	defer p.Close(ctx)
//	i, err := p.TakeAll(limits, states, now, cost, decisions) // as core.TakeAll
//
// A *Pool implements core.Decider, so a store runs the module instead of
// the native core when it is the store's decider
// (memstore.Config.Decider, pgstore.Config.Decider with ModeGo). Take and Peek mirror core.Take and
// core.Peek for one limit.
//
// # Compilation and instances
//
// New compiles the module once per process: compiled code is kept in a
// process-wide in-memory compilation cache, so a second Pool only decodes the
// module (tens of milliseconds instead of over half a second). Config.CacheDir
// keeps it on disk across processes. New then starts one instance, calling
// the module's _initialize (it is a reactor) and checking abi_version and the
// buffer layout; a module that is not at ABIVersion fails with an error
// matching ErrABIVersion. Further instances start on demand, up to
// Config.MaxInstances (default 2 × GOMAXPROCS); starting one takes a few
// milliseconds and costs about 3 MB of linear memory plus about as much Go
// heap. Instances live until Close.
//
// # Serving before the module is compiled
//
// The first compilation takes over half a second of CPU, and seconds on a
// busy machine. A Handoff (NewHandoff) is a core.Decider that decides with
// the native core from its first call while a Pool is built in the
// background, then switches to the Pool atomically. The switch cannot change
// a decision: the module is package core, and both take and return the same
// core.State. If the Pool cannot be built, the native core keeps deciding
// (Handoff.Err says why).
//
// # Pooling
//
// An instance owns one buffer in its linear memory, so it serves one call at
// a time. Idle instances sit in a fixed array of atomic slots, one per
// possible instance: a call takes one with a single compare-and-swap and
// returns it with another, and only when every slot is empty does it take a
// mutex, to start an instance or wait for one: BenchmarkPool compares it
// with a mutex-guarded stack and a buffered channel (figures in
// BENCHMARKS.md; the slots are the fastest). sync.Pool is not used because it
// drops items at garbage collection, and a dropped instance would have to be
// closed and restarted, which costs milliseconds.
//
// # Cost of a decision
//
// TakeAll, PeekAll, Take and Peek allocate nothing: each instance has a
// preallocated call stack, the buffer is read and written through a view of
// the module's memory, and the module itself allocates nothing per call.
// The host's own share (pool, encoding, call) is small; the rest is the
// core running as WebAssembly, which Go's wasm backend and wazero make many
// times slower than native. BENCHMARKS.md has the measured figures, from
// bench_test.go.
//
// # Errors
//
// Decision errors are the core.Error values the native core returns,
// matchable with errors.Is. The host adds ErrClosed (after Close),
// ErrTooManyLimits (more than MaxLimits limits in one call) and, should the
// module ever trap, an error matching ErrTrap: the instance that trapped is
// discarded, never reused, and the pool carries on with fresh instances.
//
// # Concurrency
//
// A Pool is safe for concurrent use. Like the native core, it writes only
// to the states and decisions it is given, so callers serialize calls on
// the same state (a store's row lock).
package wasm

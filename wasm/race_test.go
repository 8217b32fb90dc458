//go:build race

package wasm_test

// raceEnabled shortens the CPU-bound tests under the race detector, whose
// point there is the host's concurrency, not the core's arithmetic.
const raceEnabled = true

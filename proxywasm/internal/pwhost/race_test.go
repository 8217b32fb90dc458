//go:build race

package pwhost

// raceEnabled shortens the CPU-bound tests under the race detector, which
// slows every host call tenfold: their point there is the host's
// concurrency.
const raceEnabled = true
